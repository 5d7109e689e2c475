import functools

import jax
import jax.numpy as jnp
import pytest

from batchrl import algorithm, env_spec
from batchrl.configs import presets
from batchrl.ppo import agent_networks
from batchrl.ppo import config as config_lib
from batchrl.scripts import train
from batchrl.training import device_memory, environments


def test_nbytes_counts_every_leaf_in_its_own_dtype():
    tree = {"obs": jnp.zeros((4, 3), jnp.uint8), "value": jax.ShapeDtypeStruct((4,), jnp.float32)}
    assert device_memory.nbytes(tree) == 4 * 3 * 1 + 4 * 4


@pytest.mark.parametrize(
    ("count", "reading"), [(512, "512 B"), (3 * 2**20 + 2**19, "3.5 MiB"), (2**31, "2.0 GiB")]
)
def test_human_reads_bytes_in_binary_units(count, reading):
    assert device_memory.human(count) == reading


def test_a_storage_larger_than_free_memory_is_refused_naming_its_size():
    free = device_memory.available(jax.local_devices()[0])
    assert free is not None and free > 0
    with pytest.raises(MemoryError, match=r"the rollout takes [\d.]+ TiB, more than"):
        device_memory.check_fits(2**63, "rollout")
    device_memory.check_fits(1024, "rollout")  # A small one passes.


def test_the_train_command_refuses_a_storage_that_cannot_fit_and_says_its_size(tmp_path, capsys):
    args = ["--logdir", str(tmp_path), "--config", "pendulum_jax"]
    code = train.main([*args, "--set", "update_every=1000000000"])
    error = capsys.readouterr().err
    assert code == 1
    assert error.count("\n") == 1
    assert "kl_penalty objective's storage takes" in error and "free on cpu" in error


def test_the_clipped_rollout_of_atari_sized_frames_is_counted_in_uint8():
    # 8 envs x 128 steps of 4 x 84 x 84 uint8 frames, 4 discrete actions: what start prints.
    frame = env_spec.ObsLeaf((4, 84, 84), "uint8", env_spec.IMAGE, low=0.0, high=255.0)
    spec = env_spec.EnvSpec(frame, discrete=True, num_actions=4, action_start=(0,))
    config = config_lib.ClippedConfig(steps_per_update=128, num_minibatches=4)
    networks = agent_networks.Networks(config, spec)
    assert networks.torso.parts[0].network == "nature"
    shape = config_lib.RunShape(num_envs=8, max_length=27_000, steps=10_000_000)
    init = functools.partial(algorithm.of(config).init, networks, shape)
    storage = jax.eval_shape(init, jax.random.key(0)).storage
    assert storage.rollout.obs.dtype == jnp.uint8
    assert storage.rollout.obs.shape == (128, 8, 4, 84, 84)
    frames = 128 * 8 * 4 * 84 * 84  # 28,901,376 bytes, one each.
    # Action (int32), log-prob, reward, next value (float32), terminated, truncated (bool),
    # and the position written to.
    rest = 128 * 8 * (4 + 4 + 4 + 4 + 1 + 1) + 4
    assert device_memory.nbytes(storage) == frames + rest == 28_919_812
    assert device_memory.human(device_memory.nbytes(storage)) == "27.6 MiB"


def test_the_breakout_minatar_presets_rollout_is_counted_in_the_envs_float32():
    # gymnax's MinAtar grids are float32 [10, 10, 4]: 64 envs x 128 steps of them.
    config = presets.get("breakout_minatar")
    networks = agent_networks.Networks(config.algorithm, environments.check_env(config))
    init = functools.partial(algorithm.of(config.algorithm).init, networks, config.shape)
    storage = jax.eval_shape(init, jax.random.key(0)).storage
    assert storage.rollout.obs.dtype == jnp.float32
    assert storage.rollout.obs.shape == (128, 64, 10, 10, 4)
    grids = 128 * 64 * 10 * 10 * 4 * 4  # 13,107,200 bytes.
    rest = 128 * 64 * (4 + 4 + 4 + 4 + 1 + 1) + 4
    assert device_memory.nbytes(storage) == grids + rest == 13_254_660
    assert device_memory.human(device_memory.nbytes(storage)) == "12.6 MiB"


def test_xlas_failed_allocation_is_one_line_with_its_size():
    # A phase past what is free is refused before it runs; an allocation elsewhere (a
    # split or overlapped phase, a GPU's) still fails in XLA, said in one line.
    with pytest.raises(Exception) as failed:
        jnp.zeros(2**45, jnp.float32).block_until_ready()
    assert device_memory.out_of_memory(failed.value) == (
        "out of memory allocating 128.0 TiB on the device: lower num_envs, policy_layers, "
        "value_layers, max_length, update_every or steps_per_update, or train fewer seeds "
        "together"
    )
    assert device_memory.out_of_memory(ValueError("other")) is None
