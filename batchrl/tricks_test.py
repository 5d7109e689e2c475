"""Each performance trick turns off by its switch, and the code then gives the same results."""

import importlib.util
import json
import os
import subprocess
import sys
import threading

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from jax import lax

from batchrl import tricks
from batchrl.bridge import one_block, thread_state
from batchrl.envs import BatchEnv
from batchrl.envs.host import vector_infos_test
from batchrl.networks import conv_matmul


def test_the_variable_turns_tricks_off_by_name_or_all(monkeypatch):
    monkeypatch.delenv(tricks.VARIABLE, raising=False)
    assert all(tricks.on(name) for name in tricks.TRICKS)
    monkeypatch.setenv(tricks.VARIABLE, "one_block, lazy_infos")
    assert [name for name in tricks.TRICKS if not tricks.on(name)] == ["one_block", "lazy_infos"]
    monkeypatch.setenv(tricks.VARIABLE, "all")
    assert not any(tricks.on(name) for name in tricks.TRICKS)
    monkeypatch.setenv(tricks.VARIABLE, "one_block,nope")
    with pytest.raises(ValueError, match=r"^BATCHRL_TRICKS_OFF names unknown tricks \['nope'\]"):
        tricks.on("one_block")
    with pytest.raises(ValueError, match=r"^unknown trick 'nope': one of \('one_block'"):
        tricks.on("nope")


def primitives(function, *args) -> set[str]:
    """The primitives of `function`'s jaxpr and of the jaxprs inside its equations."""

    def walk(jaxpr) -> set[str]:
        found = set()
        for equation in jaxpr.eqns:
            found.add(equation.primitive.name)
            for value in equation.params.values():
                for item in value if isinstance(value, tuple | list) else (value,):
                    inner = getattr(item, "jaxpr", item)
                    if hasattr(inner, "eqns"):
                        found |= walk(inner)
        return found

    return walk(jax.make_jaxpr(function)(*args).jaxpr)


def test_one_block_off_runs_the_step_as_a_plain_call(monkeypatch):
    def step(x, y):
        return x * 2.0 + y, y

    x, y = jnp.arange(3.0), jnp.ones(3)
    blocked = one_block.run(step, x, y)
    assert "cond" in primitives(lambda x, y: one_block.run(step, x, y), x, y)
    monkeypatch.setenv(tricks.VARIABLE, "one_block")
    assert "cond" not in primitives(lambda x, y: one_block.run(step, x, y), x, y)
    np.testing.assert_array_equal(one_block.run(step, x, y)[0], blocked[0])


def test_conv_matmul_off_leaves_every_convolution_to_lax(monkeypatch):
    images = jax.random.uniform(jax.random.key(0), (2, 12, 12, 4))
    kernel = jax.random.normal(jax.random.key(1), (4, 4, 4, 8))
    numbers = lax.conv_dimension_numbers(images.shape, kernel.shape, ("NHWC", "HWIO", "NHWC"))

    def convolve(conv):
        return lambda x, w: conv(x, w, (2, 2), "VALID", dimension_numbers=numbers)

    def convolves(conv):  # Whether the program compiled for the CPU holds a convolution.
        lowered = jax.jit(convolve(conv)).trace(images, kernel).lower(lowering_platforms=("cpu",))
        return "stablehlo.convolution" in lowered.as_text()

    expected = convolve(lax.conv_general_dilated)(images, kernel)
    assert not convolves(conv_matmul.conv)
    monkeypatch.setenv(tricks.VARIABLE, "conv_matmul")
    assert convolves(conv_matmul.conv)
    np.testing.assert_array_equal(convolve(conv_matmul.conv)(images, kernel), expected)


def test_thread_state_off_keeps_no_thread(monkeypatch):
    monkeypatch.setenv(tricks.VARIABLE, "thread_state")
    seen = []
    thread = threading.Thread(target=lambda: (thread_state.keep(), seen.append(1)))
    thread.start()
    thread.join()
    assert seen == [1] and thread.ident not in thread_state._kept


def test_lazy_infos_off_gives_plain_dicts_equal_to_the_lazy_ones(monkeypatch):
    def step_infos():
        with BatchEnv.from_envs([gym.make("CartPole-v1") for _ in range(2)]) as env:
            env.lazy_infos = True
            env.reset(seed=0)
            return [env.step(np.zeros(2, np.int64))[-1] for _ in range(30)]

    lazy = step_infos()
    monkeypatch.setenv(tricks.VARIABLE, "lazy_infos")
    built = step_infos()
    assert {type(infos) for infos in built} == {dict} and type(lazy[0]) is not dict
    for a, b in zip(lazy, built, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_column_infos_off_builds_each_envs_infos_in_turn_into_the_same_dicts(monkeypatch, mode):
    def step_infos():
        with BatchEnv.mujoco("Hopper-v5", 4, threads=1, autoreset_mode=mode) as env:
            env.reset(seed=0)
            actions = np.random.default_rng(0).uniform(-1, 1, (80, 4, 3))
            return [env.step(action)[-1] for action in actions]

    columns = step_infos()
    monkeypatch.setenv(tricks.VARIABLE, "column_infos")
    built = step_infos()
    # Hoppers fall within 80 steps: reset envs' infos (and SAME_STEP's final ones) beside
    # the steps' columns.
    assert sum(len(infos["x_position"]) > infos["_x_velocity"].sum() for infos in built) > 5
    for t, (a, b) in enumerate(zip(columns, built, strict=True)):
        vector_infos_test.assert_same(a, b, f"step {t}")


_WRITER = """
import json, sys
from batchrl.training import metrics_log
with metrics_log.Writer(sys.argv[1]) as writer:
    writer.write(1, {"train/return": 1.0})
print(json.dumps("torch" in sys.modules))
"""


@pytest.mark.parametrize("off", ["", "hidden_torch"])
def test_hidden_torch_off_lets_tensorboardx_import_torch_where_it_is_installed(tmp_path, off):
    env = {**os.environ, tricks.VARIABLE: off}
    done = subprocess.run(
        [sys.executable, "-c", _WRITER, str(tmp_path)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    installed = importlib.util.find_spec("torch") is not None
    assert json.loads(done.stdout) == (installed and off == "hidden_torch")
    assert list(tmp_path.glob("events.out.tfevents.*"))
