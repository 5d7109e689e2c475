import jax
import jax.numpy as jnp
import pytest

from batchrl.scripts import train
from batchrl.training import memory


def test_nbytes_counts_every_leaf_in_its_own_dtype():
    tree = {"obs": jnp.zeros((4, 3), jnp.uint8), "value": jax.ShapeDtypeStruct((4,), jnp.float32)}
    assert memory.nbytes(tree) == 4 * 3 * 1 + 4 * 4


@pytest.mark.parametrize(
    ("count", "reading"), [(512, "512 B"), (3 * 2**20 + 2**19, "3.5 MiB"), (2**31, "2.0 GiB")]
)
def test_human_reads_bytes_in_binary_units(count, reading):
    assert memory.human(count) == reading


def test_a_storage_larger_than_free_memory_is_refused_naming_its_size():
    free = memory.available(jax.local_devices()[0])
    assert free is not None and free > 0
    with pytest.raises(MemoryError, match=r"the rollout takes [\d.]+ TiB, more than"):
        memory.check_fits(2**63, "rollout")
    memory.check_fits(1024, "rollout")  # A small one passes.


def test_the_train_command_refuses_a_storage_that_cannot_fit_and_says_its_size(tmp_path, capsys):
    args = ["--logdir", str(tmp_path), "--config", "pendulum_jax"]
    code = train.main([*args, "--set", "update_every=1000000000"])
    error = capsys.readouterr().err
    assert code == 1
    assert error.count("\n") == 1
    assert "kl_penalty objective's storage takes" in error and "free on cpu" in error
