"""Spaces of no fixed shape (Text, Graph, Sequence, OneOf) through a batch: SyncVectorEnv's results.

A batch carries them as Gymnasium's vector envs do, a tuple of each env's value, as
observations and as actions, in worker processes (their values crossing the command
pipe) and in this process; the compiled rollout refuses them in one line.
"""

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode

from batchrl.bridge import in_graph
from batchrl.envs import BatchEnv, spaces
from batchrl.envs.host import external, spaces_test
from batchrl.testing import cue, mock

Box, Discrete, Dict, Tuple = gym.spaces.Box, gym.spaces.Discrete, gym.spaces.Dict, gym.spaces.Tuple
Text, Graph, Sequence, OneOf = (
    gym.spaces.Text,
    gym.spaces.Graph,
    gym.spaces.Sequence,
    gym.spaces.OneOf,
)

VARIABLE = {
    "text": Text(6, charset="abcdef"),
    "graph": Graph(Box(-1.0, 1.0, (2,)), Discrete(3)),
    "sequence": Sequence(Discrete(4)),
    "stacked_sequence": Sequence(Box(0.0, 1.0, (1,)), stack=True),
    "one_of": OneOf((Discrete(3), Box(0.0, 1.0, (1,)))),
    "own": mock.OwnSpace(),  # No Gymnasium kind: batched as Gymnasium batches it, a tuple.
    # Fixed leaves beside them in one tree: the fixed ones still cross in shared memory.
    "nested": Dict(
        {
            "graph": Graph(Discrete(3), None),
            "box": Box(-1.0, 1.0, (2, 2)),
            "pair": Tuple((Text(3), Discrete(2), mock.OwnSpace())),
        }
    ),
}
BUILDERS = {
    "from_envs": spaces_test.from_envs,
    "workers": spaces_test.workers,
    "workers_and_local": spaces_test.workers_and_local,
}


def echoes(space):
    return [functools.partial(mock.ValueEcho, space, duration=d) for d in (1, 2, 3, 4)]


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
@pytest.mark.parametrize("space", VARIABLE.values(), ids=VARIABLE.keys())
def test_a_space_of_no_fixed_shape_steps_as_sync_vector_env(space, build):
    makers = echoes(space)
    with build(makers, AutoresetMode.NEXT_STEP) as ours:
        assert ours.observation_space == gym.vector.utils.batch_space(space, len(makers))
        assert spaces_test.run_like_sync(ours, makers, AutoresetMode.NEXT_STEP) >= 8
        obs = ours.reset(seed=5)[0]
        assert obs in ours.observation_space
        actions = ours.action_space.sample()
        spaces_test.assert_equivalent(ours.step(actions)[0], actions, "the actions echoed")


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=[m.name for m in AutoresetMode])
def test_final_observations_of_no_fixed_shape_are_kept_as_sync_vector_env_keeps_them(mode):
    makers = echoes(VARIABLE["nested"])
    with spaces_test.workers_and_local(makers, mode) as ours:
        assert spaces_test.run_like_sync(ours, makers, mode) >= 8


def test_the_compiled_rollout_refuses_a_leaf_of_no_fixed_shape_in_one_line():
    with BatchEnv.external([functools.partial(cue.Cue, mission=True)] * 2) as batch:
        obs, _ = batch.reset(seed=0)
        assert isinstance(obs["mission"], tuple) and all(isinstance(m, str) for m in obs["mission"])
        with pytest.raises(spaces.UnsupportedSpaceError) as refused:
            in_graph.InGraphBatchEnv(batch)
    message = str(refused.value)
    assert message.startswith(
        'obs["mission"]: Text has no fixed shape: a BatchEnv steps it, training cannot; '
        "drop it with a wrapper (env 'Cue'"
    )
    assert "\n" not in message


def test_a_batch_of_actions_of_no_fixed_shape_that_misses_an_env_is_named():
    with BatchEnv.from_envs([mock.ValueEcho(VARIABLE["text"]) for _ in range(3)]) as batch:
        batch.reset(seed=0)
        with pytest.raises(ValueError, match=r"actions has shape \(2,\)"):
            batch.step(("ab", "cd"))
        assert np.all(batch.step(("ab", "cd", "ef"))[1] == 1.0)


@pytest.mark.parametrize(
    "space", [*VARIABLE.values(), spaces_test.NESTED], ids=[*VARIABLE.keys(), "fixed_nested"]
)
def test_external_process_takes_and_returns_one_envs_value_of_any_space(space):
    """A tree or a value of no fixed shape, as the action and as the observation."""
    space.seed(0)
    actions = [space.sample() for _ in range(3)]
    direct = mock.ValueEcho(space, duration=5)
    with external.ExternalProcess(functools.partial(mock.ValueEcho, space, duration=5)) as env:
        assert data_equivalence(env.reset(seed=1), direct.reset(seed=1))
        for action in actions:
            assert data_equivalence(env.step(action), direct.step(action))
