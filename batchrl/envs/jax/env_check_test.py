"""A user's JAX-native env held against its spec: one line for what reset or step returns amiss."""

import dataclasses
import re
from typing import ClassVar

import jax.numpy as jnp
import numpy as np
import pytest

import batchrl
from batchrl.envs.jax import classic, env_check, jax_env
from batchrl.scripts import train
from batchrl.training import api


@dataclasses.dataclass(frozen=True)
class Broken(classic.Pendulum):
    """Pendulum with one fault: `fault` names what its reset or step returns amiss."""

    fault: str = ""

    def reset(self, key):
        state, obs = super().reset(key)
        if self.fault == "reset returns obs alone":
            return obs
        if self.fault == "reset obs of 4":
            return state, jnp.zeros((4,), jnp.float32)
        return state, obs

    def step(self, env_state, action):
        state, step = super().step(env_state, action)
        changes = {
            "obs int32": {"obs": step.obs.astype(jnp.int32)},
            "reward of shape (1,)": {"reward": step.reward[None]},
            "terminated float": {"terminated": jnp.float32(0.0)},
        }
        if self.fault == "a Python if" and action[0] > 0:  # A traced value has no truth.
            return state, step
        if self.fault == "state grows":
            return (state, 1), step
        if self.fault == "a Gymnasium tuple":
            return state, (step.obs, step.reward, step.terminated, step.truncated)
        return state, step.replace(**changes.get(self.fault, {}))


@dataclasses.dataclass(frozen=True)
class NoSteps(classic.Pendulum):
    max_length: ClassVar[int] = 0


@dataclasses.dataclass(frozen=True)
class SpacesForSpec(classic.Pendulum):  # A gymnax user's habit: spaces, no EnvSpec.
    env_spec: ClassVar[None] = None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (Broken(fault="reset returns obs alone"), "reset returns (env_state, obs), got float32[3]"),
        (Broken(fault="reset obs of 4"), "reset returns obs float32[4]: its env_spec says "),
        (Broken(fault="obs int32"), "step returns obs int32[3]: its env_spec says float32[3]"),
        (
            Broken(fault="reward of shape (1,)"),
            "step returns reward float32[1]: expected a number of shape () (one env's)",
        ),
        (Broken(fault="terminated float"), "step returns terminated float32[]: expected a bool"),
        (Broken(fault="state grows"), "step returns an env_state unlike reset's: "),
        (Broken(fault="a Gymnasium tuple"), "step returns (env_state, jax_env.TimeStep), got "),
        (NoSteps(), "max_length must be an int of at least 1, got 0"),
        (SpacesForSpec(), "env_spec is a NoneType, not an EnvSpec: make one from its Gymnasium"),
        # The train command printed JAX's traceback through batchrl, screens of it.
        (Broken(fault="a Python if"), "step raised TracerBoolConversionError as it was traced at "),
    ],
)
def test_what_a_jax_envs_reset_or_step_returns_amiss_is_one_line_naming_it(env, message):
    named = "(Broken|NoSteps|SpacesForSpec)"
    with pytest.raises(ValueError, match=f"^env {named}'s {re.escape(message)}") as error:
        env_check.check(env)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match=re.escape(message)):  # Before any folder or compile.
        batchrl.train("pendulum_jax", env=env, logdir=None)


def test_a_sound_env_passes_in_its_time_limit_too():
    # A numpy int as the limit too, as Gymnasium's TimeLimit takes one.
    for limit in (50, np.int64(50)):
        env_check.check(jax_env.TimeLimit(classic.CartPole(), limit))
    env_check.check(Broken())


def test_an_env_objects_time_limit_is_the_runs_unless_a_keyword_sets_one():
    # A preset's max_length (pendulum_jax's 200) cut a longer env's episodes silently.
    long = jax_env.TimeLimit(classic.Pendulum(), 300)
    assert api.configure("pendulum_jax", env=long)[0].max_length == 300
    assert api.configure("pendulum_jax", env=long, max_length=20)[0].max_length == 20


def test_an_object_with_reset_and_step_but_no_time_limit_is_named():
    class NoLimit:
        env_spec = classic.Pendulum.env_spec
        reset = classic.Pendulum.reset
        step = classic.Pendulum.step

    with pytest.raises(TypeError, match=r"^env NoLimit has reset and step but no max_length: a"):
        batchrl.train("pendulum_jax", env=NoLimit(), logdir=None)


@dataclasses.dataclass(frozen=True)
class IntObs(Broken):
    fault: str = "obs int32"


def test_an_env_a_module_class_name_makes_is_checked_too(tmp_path, capsys):
    env = f"env={__name__}:IntObs"
    argv = ["--config", "pendulum_jax", "--logdir", str(tmp_path), "--set", env, "backend=jax"]
    assert train.main(argv) == 1
    assert capsys.readouterr().err == (
        "batchrl: error: env IntObs's step returns obs int32[3]: its env_spec says float32[3] "
        "(given action float32[1], as its env_spec says)\n"
    )
    assert not any(tmp_path.iterdir())
