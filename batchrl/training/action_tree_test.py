"""Training learns an action tree: a parameterised action, JAX-native and on worker envs."""

import functools

import gymnasium as gym
import numpy as np
import pytest

import batchrl
from batchrl.testing import mock, parameter_cue

# 16 envs, episodes of 8 steps, two phases of 4,096 steps, each evaluated on 16 episodes.
SETTINGS = dict(
    steps=8192,
    num_envs=16,
    max_length=8,
    phase_steps=4096,
    eval_every=1,
    eval_episodes=16,
    policy_layers=(32,),
    value_layers=(32,),
)
OBJECTIVES = {
    "clipped": dict(
        objective="clipped",
        steps_per_update=32,
        num_minibatches=4,
        update_epochs=4,
        learning_rate=3e-3,
    ),
    "penalty": dict(update_every=8),
}
# An episode pays 8 at best, about 1.9 by chance, about 5.7 with the right arm alone:
# above 7 both leaves are learned, the amount depending on the arm. Seeds 0 to 3 ended at
# 7.76-7.97 (JAX-native, clipped), 7.93-7.95 (penalty, 0 to 2), 7.67-7.82 (worker envs).
LEARNED = 7.0


@pytest.mark.slow
@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_a_dict_action_of_an_arm_and_an_amount_is_learned(objective):
    env = parameter_cue.JaxParameterCue()
    run = batchrl.train("cartpole_jax", env=env, **SETTINGS, **OBJECTIVES[objective])
    returns = [row["eval/return"] for row in run.metrics]
    assert returns[-1] > LEARNED, returns
    # The trained policy acts in the env's tree: each arm pulled with its own amount.
    action = run.policy.act(np.eye(3, dtype=np.float32))
    assert set(action) == {"arm", "amount"}
    np.testing.assert_array_equal(action["arm"], [0, 1, 2])
    np.testing.assert_allclose(action["amount"][:, 0], parameter_cue.targets(3), atol=0.25)


@pytest.mark.slow
def test_worker_envs_with_a_dict_action_space_train_and_load(tmp_path):
    run = batchrl.train(
        "cartpole",
        env="batchrl.testing.parameter_cue:ParameterCue",
        logdir=tmp_path,
        **SETTINGS,
        **OBJECTIVES["clipped"],
    )
    assert run.config.backend == "processes"
    returns = [row["eval/return"] for row in run.metrics]
    assert returns[-1] > LEARNED, returns
    space = parameter_cue.action_space(3)
    policy = batchrl.load(run.rundir)
    for arm in range(3):
        action = policy.act(np.eye(3, dtype=np.float32)[arm], deterministic=False)
        assert space.contains(action) and action["arm"] == arm, action
    batch = policy.act(np.eye(3, dtype=np.float32))
    assert batch["arm"].dtype == np.int64 and batch["amount"].shape == (3, 1)


# A few updates of a small policy: enough to act, not to learn.
BRIEF = dict(steps=64, num_envs=4, max_length=4, phase_steps=64, eval_episodes=4)
BRIEF |= dict(policy_layers=(8,), objective="clipped", steps_per_update=8, num_minibatches=2)
BITS = gym.spaces.Box(0, 1, (8,), np.bool_)


@pytest.mark.parametrize(
    "space", [BITS, gym.spaces.Dict({"bits": BITS, "arm": gym.spaces.Discrete(2)})], ids=repr
)
def test_a_policy_acts_in_its_action_space(space):
    run = batchrl.train("cartpole", env=functools.partial(mock.ActionEcho, space), **BRIEF)
    obs = np.zeros(gym.spaces.flatdim(space))
    assert space.contains(run.policy.act(obs))
    actions = run.policy.act(np.zeros((16, obs.size)), deterministic=False)
    assert all(space.contains(item(actions, i)) for i in range(16))
    bits = actions["bits"] if isinstance(space, gym.spaces.Dict) else actions
    assert 0 < bits.mean() < 1, bits  # Drawn bits, not every float cast to True.


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Discrete(3, start=1, dtype=np.int32),
        gym.spaces.MultiDiscrete([3, 4], dtype=np.int32),
        gym.spaces.Box(-1, 1, (2,), np.float16),
    ],
    ids=repr,
)
def test_a_policy_acts_in_the_dtype_of_its_action_space(space):
    run = batchrl.train("cartpole", env=functools.partial(mock.ActionEcho, space), **BRIEF)
    obs = np.zeros(gym.spaces.flatdim(space))
    assert space.contains(run.policy.act(obs))
    actions = run.policy.act(np.zeros((4, obs.size)), deterministic=False)
    assert actions.dtype == space.dtype and all(map(space.contains, actions))


def item(tree, i):
    """Env i's action of a batch's tree."""
    if isinstance(tree, dict):
        return {key: item(value, i) for key, value in tree.items()}
    return tree[i]
