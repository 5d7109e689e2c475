"""An actor's process ends, workers and all, when the raylet that started it dies."""

import contextlib
import json
import os
import signal
import subprocess
import sys

import psutil

from batchrl.conftest import wait_gone

# The raylet's part: starts the actor's part and names its process and workers.
RAYLET = """
import subprocess, sys
actor = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
print(actor.stdout.readline(), end="", flush=True)
actor.wait()
"""
# The actor's part: the watch, then a batch of worker envs, as `Host.__init__` does.
ACTOR = """
import json, os, time
from batchrl.envs import BatchEnv
from batchrl.envs.ray import raylet_watch
if __name__ == "__main__":
    raylet_watch.end_with_raylet()
    env = BatchEnv.external("CartPole-v1", 2, envs_per_worker=1)
    print(json.dumps([os.getpid(), *(g.pid for g in env.groups)]), flush=True)
    time.sleep(600)
"""


def test_the_actor_and_its_workers_end_when_its_parent_raylet_is_killed():
    # Its raylet killed, an idle actor ran on for good, reparented, with its forkserver and
    # workers: nothing of Ray's could end it, and close's ray.kill went to a dead node.
    raylet = subprocess.Popen(
        [sys.executable, "-c", RAYLET, ACTOR], stdout=subprocess.PIPE, text=True
    )
    family: list[int] = []
    try:
        family += json.loads(raylet.stdout.readline())
        actor = psutil.Process(family[0])
        assert actor.ppid() == raylet.pid and len(family) == 3
        family += [child.pid for child in actor.children(recursive=True)]
        os.kill(raylet.pid, signal.SIGKILL)
        assert not wait_gone(family)
    finally:
        raylet.kill()
        raylet.wait()
        for pid in family:  # A failed check leaves none of them running.
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).kill()
