import subprocess
import sys

SCRIPT = """
import os
os.environ.pop("XLA_FLAGS", None)
from batchrl.bridge import xla_threads
assert xla_threads.limit()
import jax.numpy as jnp
jnp.ones(3).block_until_ready()
assert "--xla_cpu_multi_thread_eigen=false" in os.environ["XLA_FLAGS"]
assert not xla_threads.limit()  # Too late once JAX runs: says so instead of pretending.
print("ok")
"""


def test_limit_sets_flags_before_jax_starts_and_refuses_after():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    assert "already running" in result.stderr
