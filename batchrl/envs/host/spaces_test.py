"""Every supported observation space through every host layer: SyncVectorEnv's results, its dtypes.

Each test env draws its observations from its own seeded generator and ends its
episodes on a fixed schedule (durations 1 to 4), so batches autoreset at known steps and
any difference to Gymnasium's `SyncVectorEnv` is a difference in how observations move.
"""

import functools
import itertools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode

from batchrl import env_spec
from batchrl.envs import BatchEnv
from batchrl.envs.host import errors, external, obs_tree, stepper
from batchrl.testing import mock

MODES = list(AutoresetMode)
DURATIONS = (1, 2, 3, 4)
Box, Discrete, Dict, Tuple = gym.spaces.Box, gym.spaces.Discrete, gym.spaces.Dict, gym.spaces.Tuple
MultiDiscrete, MultiBinary = gym.spaces.MultiDiscrete, gym.spaces.MultiBinary

# Every leaf kind, nested in Dicts of Tuples; the outer keys given as pairs, so that the
# space keeps them out of sorted order and the batches must keep the space's order.
NESTED = Dict(
    [
        ("vector", Box(-1.0, 1.0, (3,), np.float64)),
        (
            "parts",
            Tuple(
                (
                    Discrete(5, start=-2),
                    MultiDiscrete([[2, 3], [4, 5]], start=[[0, 1], [2, 3]]),
                    Dict({"bits": MultiBinary((2, 2)), "image": Box(0, 255, (4, 5, 3), np.uint8)}),
                )
            ),
        ),
        ("flags", Box(0, 1, (2,), np.bool_)),
        ("counts", Box(-5, 5, (2,), np.int32)),
    ]
)
SPACES = {
    "box_float": Box(-1.0, 1.0, (3,), np.float32),
    "box_uint8_image": Box(0, 255, (4, 5, 3), np.uint8),
    "discrete_with_start": Discrete(5, start=-2),
    "multi_discrete": MultiDiscrete([3, 4, 2]),
    "multi_binary": MultiBinary(4),
    "tuple": Tuple((Discrete(3), Box(-1.0, 1.0, (2,), np.float32))),
    "dict": Dict({"position": Discrete(7), "velocity": Box(-1.0, 1.0, (1,), np.float64)}),
    "nested": NESTED,
}


def constructors(space, action_space=None):
    """One SpaceEnv per duration in DURATIONS; the last one's episodes are truncated."""
    return [
        functools.partial(
            mock.SpaceEnv,
            space,
            action_space,
            duration=d,
            end="truncated" if d == DURATIONS[-1] else "terminated",
        )
        for d in DURATIONS
    ]


def assert_equivalent(ours, theirs, what):
    assert data_equivalence(ours, theirs, exact=True), f"{what}: {ours!r} != {theirs!r}"


def run_like_sync(ours, makers, mode, steps=12, seed=3):
    """Steps `ours` and a SyncVectorEnv of `makers` with the same seeds and actions.

    Asserts equal trees (types, dtypes, values) of every result; in DISABLED mode, resets
    ended envs with a mask on both. Returns the episode ends compared.
    """
    theirs = gym.vector.SyncVectorEnv(makers, autoreset_mode=mode)
    try:
        got, want = ours.reset(seed=seed), theirs.reset(seed=seed)
        assert_equivalent(got[0], want[0], "reset obs")
        assert_equivalent(dict(got[1]), want[1], "reset infos")
        theirs.action_space.seed(seed)
        ends = 0
        for t in range(steps):
            action = theirs.action_space.sample()
            got, want = ours.step(action), theirs.step(action)
            names = ("obs", "reward", "terminated", "truncated")
            for name, a, b in zip(names, got[:4], want[:4], strict=True):
                assert_equivalent(a, b, f"{name} at step {t}")
            assert_equivalent(dict(got[4]), want[4], f"infos at step {t}")
            done = want[2] | want[3]
            ends += int(done.sum())
            if mode is AutoresetMode.DISABLED and done.any():
                got = ours.reset(options={"reset_mask": done})
                want = theirs.reset(options={"reset_mask": done})
                assert_equivalent(got[0], want[0], f"masked reset obs at step {t}")
                assert_equivalent(dict(got[1]), want[1], f"masked reset infos at step {t}")
        return ends
    finally:
        theirs.close()


def assert_dtypes_kept(obs, space):
    expected = obs_tree.empty(space, 1)
    env_spec.map_tree(lambda a, b: np.testing.assert_equal(a.dtype, b.dtype), obs, expected)


def from_envs(makers, mode):
    return BatchEnv.from_envs([make() for make in makers], autoreset_mode=mode)


def workers(makers, mode):
    return BatchEnv.external(makers, envs_per_worker=2, autoreset_mode=mode)


def workers_and_local(makers, mode):
    """One worker of two envs, the last two stepped in this process."""
    return BatchEnv.external(makers, envs_per_worker=2, local_envs=2, autoreset_mode=mode)


BUILDERS = [from_envs, workers, workers_and_local]


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
@pytest.mark.parametrize("build", BUILDERS, ids=[b.__name__ for b in BUILDERS])
@pytest.mark.parametrize("space", SPACES.values(), ids=SPACES.keys())
def test_every_space_steps_as_sync_vector_env(space, build, mode):
    makers = constructors(space)
    with build(makers, mode) as ours:
        assert ours.observation_space == gym.vector.utils.batch_space(space, len(makers))
        ends = run_like_sync(ours, makers, mode)
        assert_dtypes_kept(ours.step(ours.action_space.sample())[0], space)
    assert ends >= 12  # Every env's episodes ended and restarted, several times.


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
def test_multi_discrete_actions_reach_each_env(mode):
    actions = MultiDiscrete([[3, 4], [2, 5]], start=[[-1, 0], [1, 2]])
    makers = constructors(Discrete(3), actions)
    with workers_and_local(makers, mode) as ours:
        assert ours.single_action_space == actions
        run_like_sync(ours, makers, mode)
        ours.reset(seed=0)
        action = ours.action_space.sample()
        reward = ours.step(action)[1]
        np.testing.assert_array_equal(reward, 1 + action.sum(axis=(1, 2)))  # Step 1 + actions.
        ours.reset(seed=0)  # Episodes of one step: without autoreset, a reset is due.
        with pytest.raises(ValueError, match=r"actions of shape \(4, 2\) do not fit"):
            ours.step(action[:, 0])


def test_step_into_and_reset_at_write_trees_by_key_in_the_callers_dtypes():
    makers = constructors(NESTED)
    with workers_and_local(makers, AutoresetMode.DISABLED) as ours:
        expected = from_envs(makers, AutoresetMode.DISABLED)
        ours.reset(seed=1)
        expected.reset(seed=1)
        action = np.zeros((4, 2), np.float32)
        want = expected.step(action)[0]
        # The caller's tree: its dict keys in another order, a 64-bit leaf as 32 bits.
        out = obs_tree.empty(NESTED, 4)
        out = {key: out[key] for key in sorted(out, reverse=True)}
        out["vector"] = np.zeros((4, 3), np.float32)
        ours.step_into(action, out, *(np.zeros(4, t) for t in (np.float32, bool, bool)))
        cast = env_spec.map_tree(lambda a, b: b.astype(a.dtype), out, want)
        assert_equivalent(out, {key: cast[key] for key in out}, "step_into")
        assert out["vector"].dtype == np.float32
        fresh, infos = ours.reset_at([3, 0], seed=[7, 8])
        assert_equivalent(fresh, expected.reset_at([3, 0], seed=[7, 8])[0], "reset_at")
        assert [info["steps"] for info in infos] == [0, 0]
        with pytest.raises(
            ValueError,
            match=r'^obs\["parts"\]\[2\] lacks key .bits.: this batch.s observation space has keys',
        ):
            broken = {**out, "parts": (*out["parts"][:2], {})}
            ours.step_into(action, broken, *(np.zeros(4, t) for t in (np.float32, bool, bool)))
        expected.close()


def test_same_step_final_obs_are_copies_of_the_envs_trees():
    makers = constructors(NESTED)
    with workers(makers, AutoresetMode.SAME_STEP) as ours:
        ours.reset(seed=0)
        infos = ours.step(np.zeros((4, 2), np.float32))[4]
        final = infos["final_obs"][0]  # Env 0's episodes last one step.
        assert isinstance(final, dict) and list(final) == list(NESTED.spaces)
        assert final in NESTED and infos["_final_obs"].tolist() == [True, False, False, False]


class _Reuses(mock.SpaceEnv):
    """Returns one dict of arrays every time, overwritten in place, as some simulators do."""

    def __init__(self):
        super().__init__(Dict({"vector": Box(-1.0, 1.0, (3,), np.float64)}), duration=1)
        self.obs = {"vector": np.zeros(3)}

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        self.obs["vector"][:] = obs["vector"]
        return self.obs, info

    def step(self, action):
        _, *rest = super().step(action)
        self.obs["vector"] += 1.0
        return self.obs, *rest


def test_same_step_final_obs_survive_an_env_that_reuses_its_arrays():
    with BatchEnv.from_envs([_Reuses()], autoreset_mode=AutoresetMode.SAME_STEP) as env:
        start = env.reset(seed=0)[0]["vector"][0]
        kept = env.step(np.zeros((1, 2), np.float32))  # Ends, and resets in place.
        later = env.step(np.zeros((1, 2), np.float32))
        np.testing.assert_array_equal(kept[4]["final_obs"][0]["vector"], start + 1.0)
        np.testing.assert_array_equal(later[4]["final_obs"][0]["vector"], kept[0]["vector"][0] + 1)


def test_external_process_returns_one_envs_tree_as_fresh_copies():
    direct = mock.SpaceEnv(NESTED, duration=2)
    with external.ExternalProcess(functools.partial(mock.SpaceEnv, NESTED, duration=2)) as env:
        assert env.observation_space == NESTED
        got, want = env.reset(seed=4), direct.reset(seed=4)
        assert_equivalent(got, want, "reset")
        for t in range(3):
            action = np.full(2, 0.5, np.float32)
            got, want = env.step(action), direct.step(action)
            assert_equivalent(got, want, f"step {t}")
            kept = got[0]
        env.step(np.zeros(2, np.float32))
        assert_equivalent(kept, want[0], "an obs kept across a step")  # Not a view.


class _Misfit(mock.SpaceEnv):
    def __init__(self, obs):
        super().__init__(NESTED, duration=5)
        self.misfit = obs

    def step(self, action):
        _, *rest = super().step(action)
        return self.misfit(self.observation_space.sample()), *rest


def _replace(obs, path, value):
    """A copy of the nested observation with the leaf at `path` replaced (None: removed)."""
    obs = {**obs, "parts": list(obs["parts"])}
    if path == "image":
        obs["parts"][2] = {k: v for k, v in obs["parts"][2].items() if k != "image"}
    else:
        obs["parts"][1] = value
    return obs


@pytest.mark.parametrize(
    ("misfit", "message"),
    [
        (
            lambda obs: _replace(obs, "multi", np.zeros(4)),
            r"^env 'SpaceEnv' returned an observation of shape \(4,\) at "
            r'obs\["parts"\]\[1\], but its observation_space has shape \(2, 2\) there$',
        ),
        (
            lambda obs: _replace(obs, "image", None),
            r'^env \'SpaceEnv\' returned an observation without obs\["parts"\]\[2\]\["image"\] '
            r"\(a dict of keys \['bits'.*\]\), but its observation_space has it$",
        ),
        (lambda obs: obs["vector"], r'without obs\["vector"\] \(of type ndarray\), but'),
        # Values a counted leaf's space does not hold, which training one-hot encoded
        # into zeros without a word (the policy refused them when loaded).
        (
            lambda obs: {**obs, "parts": (7, *obs["parts"][1:])},
            r"^env 'SpaceEnv' returned an observation that holds 7: this leaf takes whole "
            r'numbers from -2 to 2 at obs\["parts"\]\[0\], as its observation_space says$',
        ),
        (
            lambda obs: _replace(obs, "multi", np.array([[0, 1], [2, 9]])),
            r"holds 9: this leaf takes whole numbers from 3 to 7 at obs\[\"parts\"\]\[1\]",
        ),
        (
            lambda obs: {
                **obs,
                "parts": (*obs["parts"][:2], {**obs["parts"][2], "bits": np.full((2, 2), 2)}),
            },
            r'holds 2: this leaf takes 0 or 1 at obs\["parts"\]\[2\]\["bits"\]',
        ),
        # Floats in [0, 1) for a uint8 image: written as zeros, and training went on.
        (
            lambda obs: {
                **obs,
                "parts": (
                    *obs["parts"][:2],
                    {**obs["parts"][2], "image": obs["parts"][2]["image"] / 255.0},
                ),
            },
            r"^env 'SpaceEnv' returned an observation of dtype float64 at "
            r'obs\["parts"\]\[2\]\["image"\], where its observation_space holds uint8: cast it',
        ),
    ],
)
def test_an_observation_that_does_not_fit_its_space_names_the_leaf(misfit, message):
    with BatchEnv.from_envs([mock.SpaceEnv(NESTED), _Misfit(misfit)]) as env:
        env.reset(seed=0)
        with pytest.raises(ValueError, match=message):
            env.step(np.zeros((2, 2), np.float32))


class _OldApi(mock.SpaceEnv):
    """An env of the old Gym API, in one of its calls: a 4-tuple step, a bare reset's obs."""

    def __init__(self, call):
        super().__init__(Box(-1.0, 1.0, (2,), np.float32), duration=5)
        self.call = call

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs if self.call == "reset" else (obs, info)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.call == "info":
            return obs, reward, terminated, truncated, None
        return (obs, reward, terminated or truncated, info) if self.call == "step" else obs


@pytest.mark.parametrize(
    ("call", "message"),
    [
        # Unpacked inside Gymnasium's TimeLimit: "not enough values to unpack", no env named.
        (
            "step",
            r"env '_OldApi' returned 4 values from step, as the old Gym API did: Gymnasium's "
            r"step returns \(obs, reward, terminated, truncated, info\)",
        ),
        # An obs of shape (2,) unpacked as (obs, info): "an observation of shape ()".
        (
            "reset",
            r"env '_OldApi' returned a ndarray from reset: Gymnasium's reset returns "
            r"\(obs, info\)",
        ),
        ("info", r"env '_OldApi' returned info None from step: Gymnasium's info is a dict"),
    ],
)
@pytest.mark.parametrize("build", [from_envs, workers], ids=["here", "in_a_worker"])
def test_an_env_of_the_old_gym_api_is_named_in_one_line(build, call, message):
    limited = functools.partial(_limited, call)
    refused = (ValueError, TypeError, errors.EnvRaisedError)  # The last: from its worker.
    with (
        build([limited, limited], AutoresetMode.NEXT_STEP) as env,
        pytest.raises(refused, match=message) as caught,
    ):
        env.reset(seed=0)
        env.step(np.zeros((2, 2), np.float32))
    # Not placed at batchrl's check, as if it rose there: the env returned.
    assert "/batchrl/envs/host/" not in str(caught.value).splitlines()[0]


def _limited(call):
    """`_OldApi` in the TimeLimit training wraps each env in."""
    return gym.wrappers.TimeLimit(_OldApi(call), max_episode_steps=50)


class _Counted(mock.SpaceEnv):
    """An env whose step returns `count` values, or breaks a check of batchrl's (`broken`)."""

    def __init__(self, count=5, broken=None):
        super().__init__(Box(-1.0, 1.0, (2,), np.float32), duration=5)
        self.count, self.broken = count, broken

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.broken == "obs":
            obs = np.zeros(3, np.float32)
        reward = None if self.broken == "reward" else reward
        return (obs, reward, terminated or truncated, info, {}, {})[: self.count]


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ({"count": 4}, r"env '_Counted' returned 4 values from step, as the old Gym API did: "),
        ({"count": 6}, r"env '_Counted' returned 6 values from step: Gymnasium's step returns "),
        ({"broken": "obs"}, r"env '_Counted' returned an observation of shape \(3,\), but its "),
        ({"broken": "reward"}, r"env '_Counted' returned a reward of None, but a reward is one "),
    ],
)
@pytest.mark.parametrize("build", [from_envs, workers], ids=["here", "in_a_worker"])
def test_the_one_env_of_several_that_breaks_the_api_is_named(build, bad, said):
    # Its 4 values beside the others' 5 were "zip() argument 2 is shorter than argument
    # 1", and batchrl's own checks named the worker's envs 0-1, not env 1.
    makers = [_Counted, functools.partial(_Counted, **bad)]
    with build(makers, AutoresetMode.NEXT_STEP) as env:
        env.reset(seed=0)
        with pytest.raises((ValueError, errors.EnvRaisedError), match=said) as caught:
            env.step(np.zeros((2, 2), np.float32))
    if build is workers:
        assert "(raised by env '_Counted' (env 1, worker pid " in str(caught.value)
    else:  # Its place, which a command's line names (`errors.line_here`).
        assert errors.env_index(caught.value) == 1


class _Typed(mock.SpaceEnv):
    """A uint8 image's env whose step returns its observation in `dtype`."""

    def __init__(self, dtype):
        super().__init__(Box(0, 255, (2,), np.uint8), duration=5)
        self.dtype = dtype

    def step(self, action):
        obs, *rest = super().step(action)
        return (np.asarray(obs, self.dtype), *rest)


def test_an_observation_of_a_dtype_the_space_cannot_hold_names_its_env_and_dtype():
    # uint16 beside float16 batched as float32, which no env returned: env 0 was named.
    makers = [functools.partial(_Typed, np.uint16), functools.partial(_Typed, np.float16)]
    with from_envs(makers, AutoresetMode.NEXT_STEP) as env:
        env.reset(seed=0)
        with pytest.raises(ValueError, match=r"observation of dtype float16, where its ") as caught:
            env.step(np.zeros((2, 2), np.float32))
    assert errors.env_index(caught.value) == 1


def test_envs_of_other_spaces_are_named_by_their_places():
    envs = [functools.partial(mock.SpaceEnv, Box(-1.0, 1.0, (n,), np.float32)) for n in (2, 2, 3)]
    for build in (BatchEnv.external, lambda makers: from_envs(makers, AutoresetMode.NEXT_STEP)):
        with pytest.raises(errors.SpaceMismatchError) as caught:
            build(envs)
        assert "of 'SpaceEnv' (env 0) is Box(" in str(caught.value)
        assert "and of 'SpaceEnv' (env 2) is Box(-1.0, 1.0, (3,), float32)" in str(caught.value)


class _Squares(Box):
    """A Box of the user's own class: Gymnasium's vector envs batch it as a Box."""


def _local_kinds_env(duration: int) -> mock.SpaceEnv:
    """An env whose spaces' classes are local: they pickle by value only, as a script's do."""

    class Unit(Box):
        pass

    class Choice(Discrete):
        pass

    space = Dict({"unit": Unit(-1.0, 1.0, (2,), np.float32), "choice": Choice(3)})
    return mock.SpaceEnv(space, Choice(4), duration=duration)


@pytest.mark.parametrize("build", BUILDERS, ids=[b.__name__ for b in BUILDERS])
def test_a_subclass_of_a_fixed_space_is_batched_as_its_kind_as_sync_vector_env(build):
    nested = Dict({"fine": Discrete(2), "extra": Tuple((Discrete(2), _Squares(0, 1, (2,))))})
    mode = AutoresetMode.NEXT_STEP
    with build(constructors(nested), mode) as ours:
        assert run_like_sync(ours, constructors(nested), mode) >= 12
    local = [functools.partial(_local_kinds_env, d) for d in DURATIONS]
    with build(local, mode) as ours:
        assert ours.get_attr("action_space")[0].n == 4  # Answers carry the local classes.
        assert run_like_sync(ours, local, mode) >= 12


def test_buffers_lay_each_leaf_on_its_own_cache_line_the_same_in_every_process():
    action = Box(-1.0, 1.0, (2,), np.float32)
    nbytes = stepper.Buffers.nbytes(3, NESTED, action)
    memory = bytearray(nbytes)
    first, second = (stepper.Buffers.over(memory, 3, NESTED, action) for _ in range(2))
    arrays = [first.action, *env_spec.leaves(first.obs), first.reward, first.terminated]
    addresses = sorted((a.__array_interface__["data"][0], a.nbytes) for a in arrays)
    base = np.frombuffer(memory, np.uint8).__array_interface__["data"][0]
    for (start, size), (following, _) in itertools.pairwise(addresses):
        assert (start - base) % 64 == 0 and start + size <= following  # Aligned, disjoint.
    assert list(first.obs) == list(NESTED.spaces)  # The space's key order.
    first.obs["parts"][2]["image"][1] = 7
    np.testing.assert_array_equal(second.obs["parts"][2]["image"][1], 7)  # One layout.
    assert_dtypes_kept(first.obs, NESTED)
    assert nbytes == stepper.Buffers.layout(3, NESTED, action)[1] and nbytes % 64 == 0
