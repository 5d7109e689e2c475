import json
import os
import subprocess
import sys

import pytest

SCRIPT = """
import os, sys
flags = sys.argv[1]
os.environ.pop("XLA_FLAGS", None) if flags == "none" else os.environ.update(XLA_FLAGS=flags)
from batchrl.bridge import xla_threads
if flags == "none":  # Set here, before JAX starts.
    assert xla_threads.limit()
    assert "--xla_cpu_multi_thread_eigen=false" in os.environ["XLA_FLAGS"]
import jax.numpy as jnp
jnp.ones(3).block_until_ready()
print(xla_threads.limit())
os.environ.pop("XLA_FLAGS")
print(xla_threads.limit())  # JAX started without the flag: too late, said so.
"""


@pytest.mark.parametrize("flags", ["none", "--xla_cpu_multi_thread_eigen=true"])
def test_limit_sets_flags_before_jax_starts_and_refuses_after(flags):
    # The user's own flag, set before JAX started, was told to be set before JAX starts.
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, flags], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False"]
    assert result.stderr.count("already running") == 1


KEEP_TO = """
import json, os, pathlib, subprocess, sys
from batchrl.bridge import xla_threads
every = os.sched_getaffinity(0)
assert xla_threads.keep_to(1)
import jax.numpy as jnp
(jnp.ones((300, 300)) @ jnp.ones((300, 300))).block_until_ready()
masks = {}
for task in pathlib.Path(f"/proc/{os.getpid()}/task").iterdir():
    line = next(l for l in (task / "status").read_text().splitlines() if "Cpus_allowed_list" in l)
    masks.setdefault(line.split()[1], []).append((task / "comm").read_text().strip())
child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                       capture_output=True, text=True, check=True).stdout.strip()
had = xla_threads.pin_thread()  # A learner's thread, as rollout actors' keeps it.
pinned = sorted(os.sched_getaffinity(0))
os.sched_setaffinity(0, had)
print(json.dumps([sorted(every), sorted(had), json.loads(child), masks, pinned]))
assert xla_threads.keep_to(1)  # Asked again, as the train command does: already so.
assert not xla_threads.keep_to(2)  # Other cores once JAX runs: says so instead.
"""


def test_keep_to_puts_xla_threads_on_its_cores_and_leaves_the_rest_to_children():
    """`learner_cores=1`: XLA's threads on one core, the caller's and its children's on all."""
    result = subprocess.run(
        [sys.executable, "-c", KEEP_TO], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    every, main, child, masks, pinned = json.loads(result.stdout)
    assert main == every and child == every  # The caller and its children: every core.
    first = str(every[0])
    assert len(masks[first]) >= 2, masks  # XLA's pool threads, on the first core alone.
    assert pinned == every[:1]
    assert "JAX is already running; learner_cores=2" in result.stderr


@pytest.mark.parametrize("jax_running", [False, True])
def test_keep_to_more_cores_than_the_process_has_is_refused_in_one_line(jax_running):
    # Once JAX runs (a notebook, a second `train` call), it was a warning, and trained.
    script = (
        "import os; from batchrl.bridge import xla_threads\n"
        + ("import jax; jax.devices()\n" if jax_running else "")
        + "xla_threads.keep_to(len(os.sched_getaffinity(0)) + 1)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    last = result.stderr.strip().splitlines()[-1]
    count = len(os.sched_getaffinity(0))  # The child's, inherited.
    assert last == (
        f"ValueError: learner_cores={count + 1}, but this process may run on {count} cores: "
        f"use at most {count}, or 0 for every core"
    )
