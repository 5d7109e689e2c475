import pickle

import numpy as np
import pytest

from batchrl.envs.host import infos


def roundtrip(chunks, sizes):
    return infos.Infos([pickle.loads(pickle.dumps(c)) for c in chunks], sizes)


def test_empty_infos_travel_as_nothing():
    assert infos.encode([{}, {}]) is None
    assert list(roundtrip([None], [2])) == [{}, {}]


def test_numeric_columns_keep_their_values_and_types():
    sent = [
        {"x": np.float64(0.5), "c": np.float32(-1.5), "n": 3, "ok": True, "r": 0.25},
        {"x": np.float64(1.5), "c": np.float32(2.0), "n": 4, "ok": False, "r": -0.75},
    ]
    received = list(roundtrip([infos.encode(sent)], [2]))
    assert received == sent
    for a, b in zip(received, sent, strict=True):
        assert all(type(a[k]) is type(b[k]) for k in b)


def test_arrays_of_one_shape_travel_as_columns_and_come_back_writable():
    sent = [{"tendon": np.array([i, -i], np.float64), "x": float(i)} for i in range(3)]
    encoded = infos.encode(sent)
    assert set(encoded[1]) == {"tendon", "x"} and encoded[2] is None
    received = list(roundtrip([encoded], [3]))
    for got, want in zip(received, sent, strict=True):
        assert got["tendon"].dtype == np.float64 and got["tendon"].flags.writeable
        np.testing.assert_array_equal(got["tendon"], want["tendon"])
    # Another shape, or an array where another env has a scalar, stays with the rest.
    ragged = [{"a": np.zeros(2)}, {"a": np.zeros(3)}, {"a": 1.0}]
    assert infos.encode(ragged)[1] == {}
    assert [
        info["a"].shape if hasattr(info["a"], "shape") else info["a"]
        for info in roundtrip([infos.encode(ragged)], [3])
    ] == [(2,), (3,), 1.0]


def test_mixed_and_ragged_infos_round_trip_exactly():
    sent = [
        {"name": "a", "x": 1.0, "frame": np.arange(3)},
        {"x": 2, "extra": None},
        {"x": 3.0},
    ]
    received = roundtrip([infos.encode(sent)], [3])
    assert received[0]["name"] == "a" and received[0]["x"] == 1.0
    np.testing.assert_array_equal(received[0]["frame"], np.arange(3))
    assert received[1] == {"x": 2, "extra": None} and type(received[1]["x"]) is int
    assert received[2] == {"x": 3.0}


def test_ints_past_int64_round_trip_as_python_ints():
    """An unseeded env's `np_random_seed` (128 bits) in its info, alone or beside small ones."""
    big = 2**127 + 5
    for sent in ([{"seed": big}, {"seed": big + 1}], [{"seed": 3}, {"seed": big}]):
        received = list(roundtrip([infos.encode(sent)], [2]))
        assert received == sent and all(type(info["seed"]) is int for info in received)


def test_chunks_of_several_workers_index_as_one_batch():
    batch = roundtrip([infos.encode([{"i": 0}, {"i": 1}]), None, [{"i": 3}]], [2, 1, 1])
    assert len(batch) == 4
    assert [info.get("i") for info in batch] == [0, 1, None, 3]
    assert batch[-1] == {"i": 3} and batch[1:3] == [{"i": 1}, {}]
    with pytest.raises(IndexError, match="env index 4 out of range for a batch of 4"):
        batch[4]


def test_one_key_other_orders_and_an_empty_first_info_round_trip():
    cases = [
        [{"x": 1.5}, {"x": 2.5}],
        [{"a": 1, "b": 2.0}, {"b": 3.0, "a": 4}],
        [{}, {"x": 1.0}],
        [{"x": 1.0}, {"y": 1.0}],
        [{"x": 1.0}, {"x": 2}],
        # A reset's info beside a step's, each alone of its kind: the first's keys are columns.
        [{"name": "reset", "x": 1.0}, {"x": 2.0, "v": 0.5}],
    ]
    for sent in cases:
        received = list(roundtrip([infos.encode(sent)], [len(sent)]))
        assert received == sent
        for a, b in zip(received, sent, strict=True):
            assert list(a) == list(b)  # Each env's keys in its own order.
            assert all(type(a[k]) is type(b[k]) for k in b)


def test_a_reset_among_steps_travels_whole_and_the_steps_as_columns():
    """Hoppers in a worker, one just reset: its info has fewer keys, the steps' all theirs."""
    steps = [{"x": 0.5 * i, "v": np.float32(i), "ok": True} for i in range(4)]
    sent = [*steps[:2], {"x": 9.0}, *steps[2:]]
    count, columns, rest = infos.encode(sent)
    assert list(columns) == ["x", "v", "ok"] and rest[2] == {"x": 9.0}
    received = roundtrip([(count, columns, rest)], [5])
    assert list(received) == sent
    assert [type(info["v"]) for info in received if "v" in info] == [np.float32] * 4
