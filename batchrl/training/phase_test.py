import dataclasses
import functools
from typing import ClassVar

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl import algorithm, bridge, simulate
from batchrl import env_spec as env_spec_lib
from batchrl.configs import presets
from batchrl.env_spec import EnvSpec
from batchrl.envs import BatchEnv
from batchrl.envs.jax import classic, jax_env
from batchrl.ppo import agent_networks
from batchrl.ppo import config as config_lib
from batchrl.ppo import learner as learner_lib
from batchrl.testing import cue, jax_mock, loop_runs, step_copies
from batchrl.training import loop
from batchrl.training import phase as phase_lib


def updates_by_phase(config, env, phase_steps, max_length):
    """The updates made from a fresh agent by the end of phases of `phase_steps` batch steps.

    Phases split anywhere train exactly as one (test below), and a phase whose last step
    fills the storage learns before it returns.
    """
    run = loop_runs.config_for(config, env, max_length=max_length, steps=1)
    build = functools.partial(loop.build, run, env, eval_steps=1)
    programs = {n: build(train_steps=n)[0] for n in set(phase_steps)}
    state = build(train_steps=1)[1]
    sim, agent, counts = state.train, state.agent, []
    for steps in phase_steps:
        sim, agent = programs[steps].train(sim, agent, False)
        counts.append(int(agent.learner.updates))
    return counts


@pytest.mark.slow
def test_the_seed_preset_updates_at_the_step_its_memory_fills():
    # pendulum_jax: 30 envs, 200-step episodes, 30 episodes per update. Every env ends its
    # first episode at batch step 200 (env step 6,000), where the memory fills; the agent
    # before acting and learning were apart updated there too.
    preset = presets.get("pendulum_jax")
    config, max_length = preset.algorithm, preset.max_length
    env = jax_env.VmapBatch(classic.make("Pendulum-v1"), preset.num_envs)
    assert updates_by_phase(config, env, [199, 1], max_length) == [0, 1]


@pytest.mark.slow
def test_episodes_that_end_early_update_at_the_step_the_last_one_ends():
    # Envs end episodes every 1, 2, 3, 4 steps: the 5th episode ends at step 3.
    config = config_lib.PenaltyConfig(update_every=5, chunk_length=4)
    env = jax_mock.CountingBatch((1, 2, 3, 4))
    # 7 more end by step 6; all are trained on.
    assert updates_by_phase(config, env, [1] * 6, 8) == [0, 0, 1, 1, 1, 2]


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["kl_penalty", "clipped"])
def test_phases_split_anywhere_train_exactly_as_one(objective):
    # 40 batch steps as one phase or as five of 8 (JAX-native envs are not restarted
    # between phases): updates fall mid-phase, and at a phase's end (the clipped one's
    # after steps 12, 24 and 36), the same results to the bit.
    if objective == "clipped":
        config = config_lib.ClippedConfig(steps_per_update=12, num_minibatches=4, update_epochs=2)
    else:
        config = config_lib.PenaltyConfig(update_every=6, chunk_length=5, update_epochs=2)
    env = jax_env.VmapBatch(jax_env.TimeLimit(classic.make("Pendulum-v1").env, 10), 4)
    run = loop_runs.config_for(config, env, max_length=10, steps=160)
    build = functools.partial(loop.build, run, env, eval_steps=1)
    whole, state = build(train_steps=40)
    _, one = whole.train(state.train, state.agent, False)
    sim, agent = state.train, state.agent
    programs, _ = build(train_steps=8)
    for _ in range(5):
        sim, agent = programs.train(sim, agent, False)
    assert int(one.learner.updates) == (3 if objective == "clipped" else 2)
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(agent), strict=True):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(a, b)


# gym.make itself, not a function of this module, which each worker would import (and JAX).
_CHEETAH = functools.partial(gym.make, "HalfCheetah-v5")


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["kl_penalty", "clipped"])
def test_no_batch_step_copies_a_buffer_over_a_megabyte(objective):
    # Observations of 1.1-2.2 MB in the storage (17 floats a step): the memory's 4 slots of
    # 8,000 steps, or a rollout of 2,048 x 8 steps. Before acting and learning were apart,
    # the step loop copied them through its conditionals every step (604 copies, the largest
    # 1,088,000 bytes; now 82, the largest 136 bytes).
    if objective == "clipped":
        config, num_envs = config_lib.ClippedConfig(steps_per_update=2048), 8
    else:
        config, num_envs = config_lib.PenaltyConfig(update_every=2), 2
    with BatchEnv.external(_CHEETAH, num_envs, envs_per_worker=num_envs) as envs:
        env = bridge.InGraphBatchEnv(envs, seed=0)
        networks = agent_networks.for_env(config, env)
        shape = config_lib.RunShape(num_envs=num_envs, max_length=8000, steps=10**6)
        agent = algorithm.of(config).init(networks, shape, jax.random.key(0))
        assert max(leaf.nbytes for leaf in jax.tree.leaves(agent.storage)) > 2**20
        state = simulate.init(env, jax.random.key(1))
        phase = functools.partial(phase_lib.phase, env, networks, 100)
        hlo = jax.jit(phase).lower(state, agent, True).compile().as_text()
    copies = step_copies.per_step(hlo)
    assert max((c.bytes for c in copies), default=0) < 2**20, copies


@pytest.mark.slow
def test_the_compiled_step_loop_keeps_uint8_frames_in_uint8_and_no_float_copy_of_them():
    # FrameCue's frames are uint8 [2, 6, 6], read by a CNN: the rollout the step loop
    # carries holds them in uint8 and nothing it carries is a float frame; the update makes
    # its floats from them.
    config = config_lib.ClippedConfig(steps_per_update=16, num_minibatches=2, update_epochs=1)
    with BatchEnv.external(cue.FrameCue, 4, envs_per_worker=4) as envs:
        env = bridge.InGraphBatchEnv(envs, seed=0)
        networks = agent_networks.for_env(config, env)
        assert networks.torso is not None
        shape = config_lib.RunShape(num_envs=4, max_length=10, steps=10**6)
        agent = algorithm.of(config).init(networks, shape, jax.random.key(0))
        state = simulate.init(env, jax.random.key(1))
        phase = functools.partial(phase_lib.phase, env, networks, 20)
        hlo = jax.jit(phase).lower(state, agent, True).compile().as_text()
    frames = [a for a in step_copies.carried(hlo) if a.shape[-3:] in ((2, 6, 6), (6, 6, 2))]
    assert step_copies.Copy("u8", (16, 4, 2, 6, 6)) in frames  # The rollout's frames.
    assert {a.dtype for a in frames} == {"u8"}, frames


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["kl_penalty", "clipped"])
def test_a_dict_observation_is_stored_in_its_own_dtypes_and_trains(objective):
    if objective == "clipped":
        config = config_lib.ClippedConfig(steps_per_update=8, num_minibatches=2, update_epochs=2)
    else:
        config = config_lib.PenaltyConfig(update_every=4, update_epochs=2, chunk_length=4)
    env = jax_mock.DictCountingBatch((2, 3, 4, 5), end="truncated")
    run = loop_runs.config_for(config, env, max_length=8, steps=96)
    programs, state = loop.build(run, env, train_steps=24, eval_steps=1)
    storage = state.agent.storage
    obs = storage.rollout.obs if objective == "clipped" else storage.steps.obs
    dtypes = {key: leaf.dtype for key, leaf in obs.items()}
    assert dtypes == {"vector": jnp.float32, "step": jnp.int32, "image": jnp.uint8}
    _, agent = programs.train(state.train, state.agent, False)
    assert int(agent.learner.updates) >= 2
    assert jax.tree.map(lambda leaf: leaf.dtype, agent.storage) == jax.tree.map(
        lambda leaf: leaf.dtype, storage
    )
    # Only the float vector is normalised; the stored steps are the env's observations.
    assert set(agent.learner.obs_norm) == {"vector", "step", "image"}
    assert agent.learner.obs_norm["step"] is None and agent.learner.obs_norm["image"] is None
    assert float(agent.learner.obs_norm["vector"].count) == 24 * 4
    kept = agent.storage.rollout.obs if objective == "clipped" else agent.storage.steps.obs
    assert int(kept["step"].max()) >= 1  # Each leaf holds the step number, exactly.
    np.testing.assert_array_equal(kept["image"][..., 0, 0, 0], kept["step"])
    np.testing.assert_array_equal(kept["vector"][..., 0], kept["step"])
    metrics = learner_lib.normalizer_metrics(agent.learner)
    assert all(np.isfinite(float(value)) for value in metrics.values())
    assert all(bool(jnp.isfinite(p).all()) for p in jax.tree.leaves(agent.learner.params))


@dataclasses.dataclass(frozen=True)
class Guess(jax_env.Compiled):
    """Name the cue: action[0] == cue + 1 earns 1 a step, an action outside the space -100.

    Observations {"cue": Discrete(3), "bits": MultiBinary(2)}; actions MultiDiscrete((3, 2),
    start=(1, 0)); a fresh cue every step; episodes truncated after 5 steps.
    """

    num_envs: int
    env_spec: ClassVar[EnvSpec] = EnvSpec(
        {
            "cue": env_spec_lib.ObsLeaf((), "int32", env_spec_lib.DISCRETE, (3,), (0,)),
            "bits": env_spec_lib.ObsLeaf((2,), "bool", env_spec_lib.BINARY),
        },
        discrete=True,
        action_shape=(2,),
        num_actions=5,
        action_nvec=(3, 2),
        action_start=(1, 0),
    )

    def _obs(self, cue):
        return {"cue": cue, "bits": jnp.stack([cue == 0, cue == 2], axis=1)}

    def _fresh(self, key, steps):
        key, cue_key = jax.random.split(key)
        cue = jax.random.randint(cue_key, (self.num_envs,), 0, 3)
        return {"key": key, "cue": cue, "steps": steps}, self._obs(cue)

    def init(self, key):
        return self._fresh(key, jnp.zeros((self.num_envs,), jnp.int32))

    def reset(self, env_state, obs, key, mask):
        del key
        return env_state | {"steps": jnp.where(mask, 0, env_state["steps"])}, obs

    def step(self, env_state, action):
        inside = (action >= jnp.array([1, 0])) & (action <= jnp.array([3, 1]))
        right = action[:, 0] == env_state["cue"] + 1
        reward = jnp.where(inside.all(axis=1), right.astype(jnp.float32), -100.0)
        steps = env_state["steps"] + 1
        env_state, obs = self._fresh(env_state["key"], steps)
        never = jnp.zeros_like(right)
        return env_state, jax_env.TimeStep(obs, reward, never, steps >= 5)


@pytest.mark.slow
def test_multi_discrete_actions_learn_a_discrete_cue():
    config = config_lib.ClippedConfig(
        steps_per_update=16, num_minibatches=4, update_epochs=4, learning_rate=3e-3,
        policy_layers=(32,), value_layers=(32,),
    )  # fmt: skip
    metrics, state = loop_runs.train(config, Guess(16), 64, 5, phases=4, max_length=5)
    rollout = state.agent.storage.rollout
    assert rollout.obs["cue"].dtype == jnp.int32 and rollout.obs["bits"].dtype == jnp.bool_
    assert rollout.action.shape == (16, 16, 2) and rollout.action.dtype == jnp.int32
    assert min(m["train/return"] for m in metrics) > -1.0  # Every action inside the space.
    assert metrics[-1]["eval/return"] >= 4.5, [m["eval/return"] for m in metrics]
    # No leaf is normalised: the normaliser reports its rewards' statistics only.
    assert "normalizer/obs_mean" not in metrics[-1]
    assert metrics[-1]["normalizer/count"] == 4 * 64 * 16
