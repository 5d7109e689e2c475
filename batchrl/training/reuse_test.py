"""Equal JAX-native runs in one process share their programs; nothing else does."""

import dataclasses
import gc
import os

import jax
import pytest

import batchrl
from batchrl.configs import presets, train_config
from batchrl.envs.jax import classic
from batchrl.ppo import objectives
from batchrl.training import api_test, environments, loop, reuse
from batchrl.training import run as run_lib

# Two phases of one update each on 4 envs.
TINY = dict(steps=400, num_envs=4, max_length=50, update_every=4, eval_every=1)
TINY |= dict(policy_layers=(16,), value_layers=(16,), eval_episodes=4, final_episodes=4)


def learned(result: run_lib.Run) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith("perf/")} for row in result.metrics]


def lowerings(train):
    """What `train()` returns, and the programs JAX lowered while it ran."""
    lowered = []

    def count(event: str, duration: float, **_) -> None:
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            lowered.append(event)

    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        return train(), len(lowered)
    finally:
        jax.monitoring.unregister_event_duration_listener(count)


def test_a_seed_run_after_another_lowers_nothing_and_trains_as_if_built_anew(capsys):
    config = train_config.replace(presets.get("pendulum_jax"), **TINY)
    reuse.clear()
    first, built = lowerings(lambda: run_lib.train(None, dataclasses.replace(config, seed=1)))
    assert "; compiling its programs" in capsys.readouterr().out
    again, rebuilt = lowerings(lambda: run_lib.train(None, dataclasses.replace(config, seed=2)))
    assert built >= 3 and rebuilt == 0, (built, rebuilt)  # Init, phase, evaluation.
    assert "; programs an earlier run here compiled" in capsys.readouterr().out
    assert learned(again) != learned(first)  # Another seed, another run.
    reuse.clear()
    anew = run_lib.train(None, dataclasses.replace(config, seed=2))
    assert learned(again) == learned(anew)


@pytest.mark.parametrize(
    "change",
    [
        {"steps": 800},  # A learning rate that decays over the budget, say.
        {"num_envs": 8},
        {"eval_sample": True},
    ],
)
def test_a_run_that_differs_in_more_than_its_seed_builds_its_own(change):
    config = train_config.replace(presets.get("pendulum_jax"), **TINY)
    env, _ = environments.build(config)
    programs, _ = loop.build(config, env)
    other = train_config.replace(config, **change, seed=5)
    other_env, _ = environments.build(other)
    assert loop.build(other, other_env)[0] is not programs
    assert loop.build(dataclasses.replace(config, seed=5), env)[0] is programs


def test_an_algorithm_record_replaced_is_built_anew(monkeypatch):
    config = train_config.replace(presets.get("pendulum_jax"), **TINY)
    env, _ = environments.build(config)
    programs, _ = loop.build(config, env)
    check_finite = objectives.PENALTY.check_finite
    replaced = objectives.PENALTY._replace(check_finite=lambda *args: check_finite(*args))
    monkeypatch.setattr(objectives, "PENALTY", replaced)
    again, _ = loop.build(config, env)
    assert again is not programs and again.algorithm is replaced


def test_host_envs_are_never_shared():
    cartpole = train_config.replace(presets.get("cartpole"), num_envs=2)
    env, batch_env = environments.build(cartpole)
    try:
        assert reuse.key(cartpole, (env, env), ()) is None
    finally:
        batch_env.close()


def test_a_gymnax_preset_built_again_shares_its_programs_and_other_parameters_do_not():
    # gymnax envs hold their parameters as arrays (Acrobot's): equal by their contents.
    tiny = dict(num_envs=2, steps=256, policy_layers=(16,), value_layers=(16,))
    config = train_config.replace(presets.get("acrobot_gymnax"), **tiny)
    programs, _ = loop.build(config, environments.build(config)[0])
    assert loop.build(config, environments.build(config)[0])[0] is programs
    env, _ = environments.build(config)
    limit = env.env  # VmapBatch -> TimeLimit -> GymnaxEnv
    params = limit.env.params.replace(max_steps_in_episode=499)
    gymnax = dataclasses.replace(limit.env, params=params)
    other = dataclasses.replace(env, env=dataclasses.replace(limit, env=gymnax))
    assert loop.build(config, other)[0] is not programs


class Scaled:
    """Pendulum with its torque scaled by `scale`: a plain object, equal to itself only."""

    def __init__(self, scale: float):
        self.inner = classic.make("Pendulum-v1")
        self.env_spec, self.max_length = self.inner.env_spec, self.inner.max_length
        self.scale = scale

    def reset(self, key):
        return self.inner.reset(key)

    def step(self, state, action):
        return self.inner.step(state, action * self.scale)


def test_an_env_object_changed_in_place_builds_anew():
    # In a notebook: train, change the env's setting, train again. The programs traced
    # with the old setting were taken again, and the run trained the old env.
    def train(env):
        return learned(batchrl.train("pendulum_jax", env=env, logdir=None, **TINY))

    reuse.clear()
    env = Scaled(1.0)
    first = train(env)
    assert train(env) == first  # Unchanged, the same object trains as it did.
    env.scale = 0.0
    changed = train(env)
    reuse.clear()
    assert changed == train(Scaled(0.0)) != first


def test_runs_on_worker_envs_one_after_another_leave_no_files_open():
    # JAX's caches kept each run's callbacks and through them its closed envs: 6 open files
    # (pipes, shared memory) a run, until a notebook's loop of runs hit "Too many open files".
    def open_files() -> int:
        gc.collect()
        return len(os.listdir("/proc/self/fd"))

    settings = {"objective": "clipped", **api_test.TINY_CLIPPED, "steps": 64, "num_envs": 2}
    batchrl.train("cartpole", **settings)
    first = open_files()
    for seed in (1, 2):
        batchrl.train("cartpole", seed=seed, **settings)
    assert open_files() == first
