import pickle

import gymnasium as gym
import numpy as np
import pytest

from batchrl.envs.host import infos, vector_infos


def add_info(num_envs):
    """Gymnasium's own `VectorEnv._add_info`, of a vector env of `num_envs` that only lends it."""
    vector_env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * num_envs)
    vector_env.close()
    return vector_env._add_info


def gymnasiums(batch, envs, num_envs):
    """What Gymnasium's VectorEnv makes of the decoded infos, one env at a time."""
    add = add_info(num_envs)
    built: dict = {}
    for i, info in zip(envs, batch, strict=True):
        if info:
            built = add(built, info, int(i))
    return built


def assert_same(built, expected, where=""):
    """Equal dicts: keys in the same order, arrays of one dtype, objects of one type.

    Or the same error, where Gymnasium's `_add_info` raises one (a string in a float array).
    """
    if isinstance(expected, Exception):
        assert type(built) is type(expected) and str(built) == str(expected), where
        return
    assert list(built) == list(expected), where
    for key, want in expected.items():
        got = built[key]
        if isinstance(want, dict):
            assert_same(got, want, f"{where}/{key}")
            continue
        if not isinstance(want, np.ndarray):  # What `_add_info` leaves of odd mixes.
            assert type(got) is type(want) and got == want, f"{where}/{key}"
            continue
        assert got.dtype == want.dtype and got.shape == want.shape, f"{where}/{key}"
        if want.dtype != object:
            np.testing.assert_array_equal(got, want, err_msg=f"{where}/{key}")
            continue
        for a, b in zip(got, want, strict=True):
            assert type(a) is type(b), f"{where}/{key}: {a!r} {b!r}"
            np.testing.assert_array_equal(a, b, err_msg=f"{where}/{key}")


def outcome(build):
    """What `build` returns, or the error it raises."""
    try:
        return build()
    except (AttributeError, OverflowError, TypeError, ValueError) as error:
        return error


def built_both_ways(chunks, sizes, envs, num_envs):
    """The vector infos of `chunks` built by `vector_infos.vector`, and Gymnasium's."""
    batch = infos.Infos([pickle.loads(pickle.dumps(c)) for c in chunks], sizes)
    ours = outcome(lambda: vector_infos.vector(batch, envs, num_envs, add_info(num_envs)))
    return ours, outcome(lambda: gymnasiums(batch, envs, num_envs))


def columns(count, special=None, python=(), **keys):
    return infos.Columns(keys, count, special or {}, frozenset(python))


@pytest.mark.parametrize(
    ("chunks", "sizes", "envs", "num_envs"),
    [
        # MuJoCo's infos from two workers: NumPy floats and ints, Python scalars.
        (
            [
                [{"x": np.float64(0.5), "c": np.float32(-1.5), "n": 3, "ok": True, "r": 0.25}] * 2,
                [{"x": np.float64(1.5), "c": np.float32(2.0), "n": 4, "ok": False, "r": -0.5}],
            ],
            [2, 1],
            [0, 1, 2],
            3,
        ),
        # A worker whose envs reported nothing, and a reset of envs 3, 0 and 2 of 5.
        ([[{"a": np.int32(7)}], [{}, {}]], [1, 2], [3, 0, 2], 5),
        # Humanoid's: arrays of one shape beside scalars.
        (
            [[{"tendon": np.array([0.5, i]), "x": np.float64(i)} for i in range(2)]] * 2,
            [2, 2],
            [0, 1, 2, 3],
            4,
        ),
        # A worker's envs, and envs stepped in this process (their dicts as they are).
        ([[{"x": 1.0, "n": np.int64(2)}], ([{"x": 2.0, "n": np.int64(5)}],)], [1, 1], [0, 1], 2),
        # Hoppers in a worker, one of them just reset: fewer keys, first.
        (
            [[{"x": 0.1}, {"x": 0.2, "v": np.float32(1.0)}, {"x": 0.3, "v": np.float32(2.0)}]],
            [3],
            [0, 1, 2],
            3,
        ),
        ([[{"x": 1.0}], [{"y": 1.0}]], [1, 1], [0, 1], 2),  # Other keys in another worker.
        ([[{"x": 1.0}], [{"x": np.float32(1.0)}]], [1, 1], [0, 1], 2),  # Another type.
        ([[{"done": np.bool_(True)}] * 2], [2], [0, 1], 2),  # NumPy bools: objects.
        ([[{"x": 1.0, "name": "a"}]], [1], [0], 1),  # Not all numeric.
        ([[{"final_obs": np.zeros(2, np.float32)}] * 2], [2], [0, 1], 2),  # Objects too.
        ([[{"seed": 2**63 + 1}, {"seed": 3}]], [2], [0, 1], 2),  # Past int64: raises.
        ([[{"x": 1.0, "_x": 0.5}] * 2], [2], [0, 1], 2),  # A key like a mask.
    ],
)
def test_vector_infos_of_workers_chunks_equal_gymnasiums_env_by_env(chunks, sizes, envs, num_envs):
    # A chunk in a tuple stays the list of dicts it holds, as a group in this process gives.
    sent = [chunk[0] if isinstance(chunk, tuple) else infos.encode(chunk) for chunk in chunks]
    assert_same(*built_both_ways(sent, sizes, envs, num_envs))


def test_columns_with_resets_and_final_steps_equal_gymnasiums_env_by_env():
    x = np.array([0.5, 1.5, 2.5, 3.5])
    final = {"final_obs": np.ones(2), "final_info": {"x": np.float64(9.0)}, "x": np.float32(0.0)}
    cases = [
        columns(4, x=x, v=np.arange(4.0, dtype=np.float32)),
        columns(4, {0: {"x": np.float64(7.0)}}, x=x, v=np.arange(4, dtype=np.int32)),
        columns(4, {1: final, 3: {}}, x=x, tendon=np.arange(8.0).reshape(4, 2)),
        columns(4, {2: {"lives": 5}}, ("lives",), lives=np.array([3, 2, 1, 0], np.int32)),
        columns(4, {0: final}, x=x),  # A float32 array made first, the floats written in.
        columns(4, {3: {"x": "gone"}}, x=x, ok=np.array([True, False, True, True])),
    ]
    for n, case in enumerate(cases):
        for envs, num_envs in (([0, 1, 2, 3], 4), ([5, 0, 3, 2], 6)):
            got, want = built_both_ways([case], [4], envs, num_envs)
            assert_same(got, want, f"case {n} at {envs}")
    # Two groups' columns in one batch: the second's keys after the first's.
    got, want = built_both_ways([cases[1], cases[2]], [4, 4], range(8), 8)
    assert_same(got, want)


def test_random_infos_in_every_chunk_form_equal_gymnasiums_env_by_env():
    rng = np.random.default_rng(0)
    values = [
        lambda: float(rng.normal()),
        lambda: int(rng.integers(-5, 5)),
        lambda: bool(rng.integers(2)),
        lambda: np.float32(rng.normal()),
        lambda: np.int16(rng.integers(100)),
        lambda: np.bool_(rng.integers(2)),
        lambda: rng.normal(size=2),
        lambda: "text",
        lambda: {"inner": float(rng.normal())},
    ]
    keys = ["a", "b", "c", "_a", "final_obs"]

    def info():
        chosen = rng.permutation(keys)[: rng.integers(0, 4)]
        return {str(k): values[rng.integers(len(values))]() for k in chosen}

    def chunk(size):
        form = rng.integers(3)
        if form == 0:  # A worker's: encoded.
            common = info()
            kept = [dict(common) if rng.random() < 0.7 else info() for _ in range(size)]
            return infos.encode(kept)
        if form == 1:  # Envs in this process: their dicts.
            return [info() for _ in range(size)]
        # A MuJoCo or ale-py batch's: columns, and some envs with their own.
        kinds = {"a": np.float64, "_a": np.float32, "b": np.float32, "c": np.int32}
        chosen = [k for k in kinds if rng.random() < 0.7]
        special = {int(i): info() for i in np.flatnonzero(rng.random(size) < 0.3)}
        python = {k for k in chosen if rng.random() < 0.3}
        arrays = {k: (rng.normal(size=size) * 3).astype(kinds[k]) for k in chosen}
        return columns(size, special, python, **arrays)

    for trial in range(300):
        sizes = [int(s) for s in rng.integers(1, 4, rng.integers(1, 4))]
        num_envs = sum(sizes) + int(rng.integers(2))
        # Some envs in any order (a reset's), or all of them from an offset (a step's).
        if trial % 2:
            envs = rng.permutation(num_envs)[: sum(sizes)]
        else:
            envs = range(num_envs - sum(sizes), num_envs)
        chunks = [chunk(size) for size in sizes]
        assert_same(*built_both_ways(chunks, sizes, envs, num_envs), f"trial {trial}")
