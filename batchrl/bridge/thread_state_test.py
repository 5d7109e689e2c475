import os
import subprocess
import sys
import threading

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from batchrl import bridge, simulate
from batchrl.bridge import thread_state
from batchrl.envs import BatchEnv


class ThreadProbeEnv(gym.Env):
    """Records, at each step, whether its thread's Python locals survived the last step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self):
        self.locals = threading.local()
        self.kept: list[bool] = []
        self.threads: set[int] = set()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.threads.add(threading.get_ident())
        self.kept.append(getattr(self.locals, "mark", False))
        self.locals.mark = True
        return np.zeros(2, np.float32), 0.0, False, False, {}


def probe_rollout(devices: int, num_steps: int = 20) -> ThreadProbeEnv:
    """Runs a compiled rollout of `num_steps` on a ThreadProbeEnv, the program over `devices`."""
    probe = ThreadProbeEnv()
    env = bridge.InGraphBatchEnv(BatchEnv.from_envs([probe]), devices=devices)

    def perform(agent_state, obs, key):
        return agent_state, jnp.tanh(obs[:, :1] + jax.random.normal(key, (1, 1))), ()

    keep = lambda agent_state, _: agent_state  # noqa: E731
    learn = lambda agent_state, _, extra: (agent_state, extra)  # noqa: E731
    agent = simulate.Agent(keep, perform, learn, keep)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:devices]), ("devices",))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    state = jax.device_put(simulate.init(env, jax.random.key(0)), replicated)
    rollout = jax.jit(
        lambda state: simulate.collect(env, agent, state, (), num_steps)[0],
        out_shardings=replicated,
    )
    jax.block_until_ready(rollout(state))
    return probe


SCRIPT = """
import threading
from batchrl.bridge import thread_state_test
probe = thread_state_test.probe_rollout(devices=2)
print(sum(probe.kept[1:]), threading.get_ident() in probe.threads)
"""


def test_host_calls_from_xla_threads_keep_their_thread_state():
    # A program over two devices runs each device's part on one of XLA's own threads,
    # never the caller's, so every host call comes from a thread Python did not make:
    # there, a thread state made afresh for each call would drop the locals at every step.
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "XLA_FLAGS": flags},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["19", "False"]


def test_every_host_call_of_a_one_device_program_keeps_its_thread_state(monkeypatch):
    # On one device XLA picks the thread (the caller's or its own) by its own measure, so
    # each call, init and 20 steps, is shown to go through `keep`, which the test above
    # shows works.
    calls = []
    monkeypatch.setattr(thread_state, "keep", lambda: calls.append(threading.get_ident()))
    probe = probe_rollout(devices=1)
    assert len(probe.kept) == 20
    assert len(calls) == 21
