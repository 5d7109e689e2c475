import collections
import json

import gymnasium as gym
import numpy as np
import pytest

from batchrl.envs import space_data

SPACES = [
    gym.make("CartPole-v1").observation_space,  # Infinite bounds among finite ones.
    gym.make("Pendulum-v1").action_space,
    gym.spaces.Box(0, 255, (84, 84, 4), np.uint8),
    gym.spaces.Box(np.array([0, -3]), np.array([5, 6]), dtype=np.int32),
    # Integer extremes a float64 cannot hold: they came back as int64's minimum, or 0.
    gym.spaces.Box(np.iinfo(np.int64).min, np.iinfo(np.int64).max, (2,), np.int64),
    gym.spaces.Box(0, np.iinfo(np.uint64).max, (2,), np.uint64),
    gym.spaces.Box(-np.inf, np.inf, (2, 3), np.float64),
    gym.spaces.Box(0, 1, (3,), np.bool_),
    gym.spaces.Discrete(5, start=-2),
    gym.spaces.Discrete(3, start=1, dtype=np.int32),  # Its dtype is the actions' dtype.
    gym.spaces.MultiDiscrete([[3, 4], [5, 6]], start=[[1, 0], [0, -1]]),
    gym.spaces.MultiBinary([2, 3]),
    gym.spaces.Dict(
        {
            "view": gym.spaces.Box(0, 1, (2, 2)),
            "pair": gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.MultiBinary(4)]),
        }
    ),
    # Keys in the env's order, unsorted, as an OrderedDict (or 1.4's sort_keys=False) keeps
    # them: read back sorted, a loaded policy's space listed its leaves in another order.
    gym.spaces.Dict(
        collections.OrderedDict([("z", gym.spaces.Discrete(2)), ("a", gym.spaces.Box(0, 1))])
    ),
]


@pytest.mark.parametrize("space", SPACES, ids=repr)
def test_every_space_training_takes_is_kept_as_standard_json_and_read_back_equal(space):
    text = json.dumps(space_data.to_data(space), allow_nan=False)  # No Infinity: standard.
    back = space_data.from_data(json.loads(text))
    assert back == space and type(back) is type(space)
    assert back.dtype == space.dtype
    if isinstance(space, gym.spaces.Box):  # Bounds in the space's own dtype, as the env's.
        assert back.low.dtype == space.low.dtype
    if isinstance(space, gym.spaces.Dict):
        assert list(back.spaces) == list(space.spaces)
    pair = space_data.pair_from_data(
        json.loads(json.dumps(space_data.pair_to_data((space, space))))
    )
    assert pair == (space, space)


def test_a_box_keeps_one_bound_where_one_holds_for_every_element():
    data = space_data.to_data(gym.spaces.Box(0, 255, (84, 84, 4), np.uint8))
    assert (data["low"], data["high"]) == (0, 255)
    data = space_data.to_data(gym.make("CartPole-v1").observation_space)
    assert data["high"][1] == "inf" and data["low"][1] == "-inf"


def test_spaces_training_refuses_and_data_of_no_space_are_said_in_one_line():
    with pytest.raises(ValueError, match=r"^a run keeps spaces of Box, .* not Text\("):
        space_data.to_data(gym.spaces.Text(5))
    with pytest.raises(ValueError) as error:
        space_data.from_data({"type": "Dict", "spaces": [["a", {"type": "Discrete"}]]})
    assert (
        str(error.value)
        == "space data {'type': 'Discrete'} does not make a Discrete: KeyError('n')"
    )
    with pytest.raises(ValueError, match=r"^space data of type 'Text', expected one of Box, "):
        space_data.from_data({"type": "Text"})
    with pytest.raises(ValueError, match=r"^spaces' data holds observation_space and action_space"):
        space_data.pair_from_data({"observation_space": space_data.to_data(SPACES[0])})
