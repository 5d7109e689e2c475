import gymnasium as gym
import numpy as np
import pytest

from batchrl import env_spec
from batchrl.env_spec import EnvSpec, ObsLeaf
from batchrl.envs import spaces

Box, Discrete, Dict, Tuple = gym.spaces.Box, gym.spaces.Discrete, gym.spaces.Dict, gym.spaces.Tuple


def test_a_box_action_env_is_described_by_its_spaces():
    env = gym.make("Pendulum-v1")
    described = spaces.env_spec(env.observation_space, env.action_space)
    assert described == EnvSpec(
        env_spec.vector((3,)),
        discrete=False,
        action_shape=(1,),
        action_low=(-2.0,),
        action_high=(2.0,),
    )
    assert described.action_size == 1


def test_a_discrete_action_env_has_num_actions_its_start_and_no_bounds():
    env = gym.make("CartPole-v1")
    described = spaces.env_spec(env.observation_space, env.action_space)
    assert described.discrete and described.num_actions == 2 and described.action_size == 2
    assert described.action_shape == () and described.action_low is None
    assert described.action_start == (0,) and not described.multi_discrete
    shifted = spaces.env_spec(env.observation_space, Discrete(3, start=-1))
    assert shifted.action_start == (-1,) and shifted.num_actions == 3


def test_multi_discrete_actions_have_a_count_and_start_per_element():
    box = Box(-1, 1, (2,), np.float32)
    actions = gym.spaces.MultiDiscrete([[2, 3], [4, 5]], start=[[0, 1], [2, 3]])
    described = spaces.env_spec(box, actions)
    assert described.discrete and described.multi_discrete
    assert described.action_shape == (2, 2) and described.num_actions == 14
    assert described.action_nvec == (2, 3, 4, 5) and described.action_start == (0, 1, 2, 3)


def test_unbounded_box_actions_have_no_bounds():
    box = Box(-np.inf, np.inf, (2,), np.float32)
    described = spaces.env_spec(box, box)
    assert described.action_low is None and described.action_high is None


def test_a_box_of_bools_action_is_bits_as_a_multi_binary_is():
    box, bits = Box(-1, 1, (2,), np.float32), Box(0, 1, (3,), np.bool_)
    leaf = env_spec.ActionLeaf((3,), "bool", env_spec.BINARY)
    assert spaces.env_spec(box, bits).action == leaf
    assert spaces.env_spec(box, Dict({"bits": bits})).action == {"bits": leaf}


def test_integer_actions_of_a_dtype_not_int64_are_a_tree_that_keeps_it():
    box = Box(-1, 1, (2,), np.float32)
    one = spaces.env_spec(box, Discrete(3, start=1, dtype=np.int32))
    assert one.action == env_spec.ActionLeaf((), "int32", env_spec.DISCRETE, (3,), (1,))
    many = spaces.env_spec(box, gym.spaces.MultiDiscrete([3, 4], dtype=np.uint8))
    assert many.action == env_spec.ActionLeaf(
        (2,), "uint8", env_spec.MULTI_DISCRETE, (3, 4), (0, 0)
    )
    assert spaces.env_spec(box, Discrete(3)).discrete  # int64, Gymnasium's default: as before.


def test_subclasses_of_the_kinds_are_described_as_their_kinds():
    class UnitBox(Box):
        pass

    class Choice(Discrete):
        pass

    obs, action = (
        Dict({"unit": Box(-1, 1, (2,), np.float32), "choice": Discrete(3)}),
        Box(-1, 1, (2,)),
    )
    theirs = Dict({"unit": UnitBox(-1, 1, (2,), np.float32), "choice": Choice(3)})
    assert spaces.env_spec(theirs, UnitBox(-1, 1, (2,))) == spaces.env_spec(obs, action)
    assert spaces.env_spec(obs, Choice(4, start=1)) == spaces.env_spec(obs, Discrete(4, start=1))


def test_a_dict_observation_becomes_a_tree_in_the_spaces_key_order():
    space = Dict(
        [
            ("position", Discrete(7, start=1)),
            ("frame", Box(0, 255, (8, 8, 3), np.uint8)),
            ("more", Tuple((gym.spaces.MultiBinary(3), Box(-1, 1, (2,), np.float64)))),
        ]
    )
    tree = spaces.env_spec(space, Discrete(2)).observation
    assert list(tree) == ["position", "frame", "more"]
    assert tree["position"] == ObsLeaf((), "int64", env_spec.DISCRETE, (7,), (1,))
    assert tree["frame"] == ObsLeaf((8, 8, 3), "uint8", env_spec.IMAGE, low=0.0, high=255.0)
    assert tree["more"] == (
        ObsLeaf((3,), "int8", env_spec.BINARY),
        ObsLeaf((2,), "float64", env_spec.VECTOR),
    )


def test_unsupported_spaces_are_refused_naming_the_space():
    box = Box(-1, 1, (2,), np.float32)
    with pytest.raises(spaces.UnsupportedSpaceError, match=r"^unsupported action space Graph"):
        spaces.env_spec(box, gym.spaces.Graph(box, None))
    with pytest.raises(spaces.UnsupportedSpaceError, match=r'^obs\["a"\]\[0\]: Text has no fixed'):
        spaces.env_spec(Dict({"a": Tuple((gym.spaces.Text(4), box))}), box)


def test_an_action_space_of_no_array_is_refused_naming_it():
    box = Box(-1, 1, (2,), np.float32)
    for empty in (Dict({}), Tuple(()), Dict({"a": Tuple(())})):
        with pytest.raises(spaces.UnsupportedSpaceError, match=r"^action space .* holds no arr"):
            spaces.env_spec(box, empty)


def test_spaces_of_no_element_are_refused_naming_them():
    box = Box(-1, 1, (2,), np.float32)
    with pytest.raises(spaces.UnsupportedSpaceError, match=r"^action space Box.* holds no arr"):
        spaces.env_spec(box, Box(0, 1, (0,)), "Empty")
    for empty in (Box(0, 1, (0,)), Dict({}), Dict({"a": Box(0, 1, (3, 0))})):
        with pytest.raises(spaces.UnsupportedSpaceError, match=r"^observation space .* of Empty"):
            spaces.env_spec(empty, box, "Empty")


def test_an_integer_box_past_what_a_float32_row_holds_is_refused_in_one_line():
    # Its actions were cast to int32 and saturated: every one came out 2147483647.
    wide = Box(0, 2**40, (1,), np.int64)
    with pytest.raises(spaces.UnsupportedSpaceError, match=r"^action of E: an integer Box's"):
        spaces.env_spec(Box(-1, 1, (2,)), wide, "E")
    inside = spaces.env_spec(Box(-1, 1, (2,)), Box(-(2**24), 2**24, (1,), np.int64), "E")
    assert inside.action.high == (2.0**24,)


BITS = {"bits": env_spec.ActionLeaf((3,), "int8", env_spec.BINARY)}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(discrete=True), "a discrete EnvSpec needs num_actions"),
        (dict(discrete=True, num_actions=2, action_shape=(1,)), "action_shape \\(\\)"),
        (dict(discrete=False, num_actions=2), "a continuous EnvSpec has num_actions"),
        (dict(discrete=False, action_low=(0.0,)), "given together"),
        (dict(discrete=False, action={"a": env_spec.vector((2,))}), "a tree of ActionLeaf"),
        (dict(discrete=False, action=BITS), r"action_shape \(3,\) and no other action field"),
        (dict(discrete=True, num_actions=8, action=BITS), "is continuous"),
    ],
)
def test_an_inconsistent_spec_is_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        EnvSpec(env_spec.vector((3,)), **fields)
