"""A worker's shared memory is reserved where it is made: a full /dev/shm is one line."""

import re
import shlex
import shutil
import subprocess
import sys

import pytest

SCRIPT = """
import functools
import sys

import gymnasium as gym
import numpy as np

from batchrl.envs import BatchEnv
from batchrl.testing import mock

if __name__ == "__main__":
    frames = gym.spaces.Box(0, 255, (256, 256, 3), np.uint8)  # 192 KiB a frame.
    envs = int(sys.argv[1])
    try:
        make = functools.partial(mock.SpaceEnv, frames)
        with BatchEnv.external(make, envs, envs_per_worker=16) as env:
            env.reset(seed=0)
            env.step(env.action_space.sample())
    except MemoryError as error:
        print(error)
        sys.exit(3)
    print("stepped")
"""


def run_in_small_dev_shm(script, envs):
    """`script` with `envs` envs, where /dev/shm is a tmpfs of 4 MiB (Docker's is 64)."""
    mount = "mount -t tmpfs -o size=4m tmpfs /dev/shm"
    command = f"{mount} && exec {shlex.join([sys.executable, str(script), str(envs)])}"
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", command], capture_output=True, text=True, timeout=120
    )


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
def test_a_dev_shm_too_small_for_the_workers_frames_is_one_line_not_a_sigbus(tmp_path):
    # 32 envs of 192 KiB frames, 16 a worker: 3 MiB each, 6 MiB in all. The first worker's
    # file took its pages as they were written, and the second's writer died of SIGBUS.
    script = tmp_path / "frames.py"
    script.write_text(SCRIPT)
    refused = run_in_small_dev_shm(script, 32)
    assert refused.returncode == 3, refused.stderr
    assert re.fullmatch(
        r"a worker's shared memory of 3\.0 MiB does not fit /dev/shm \(1\.0 MiB free of 4\.0 "
        r"MiB\): give it more room \(docker run --shm-size=2g\) or step fewer envs\n",
        refused.stdout,
    )
    assert run_in_small_dev_shm(script, 8).stdout == "stepped\n"  # 1.5 MiB fits.
