import pickle
import subprocess
import sys
import tomllib

import gymnasium as gym
import numpy as np
import pytest

from batchrl import extras
from batchrl.configs import overrides, presets, train_config
from batchrl.envs import BatchEnv
from batchrl.envs.host import make
from batchrl.training import environments


def test_limit_is_the_smaller_of_the_registered_one_and_max_length():
    assert make.Make("Pendulum-v1")().spec.max_episode_steps == 200
    assert make.Make("Pendulum-v1", max_length=50)().spec.max_episode_steps == 50
    assert make.Make("Reacher-v5", max_length=1000)().spec.max_episode_steps == 50


def test_entry_point_builds_the_class_with_a_time_limit():
    env = pickle.loads(pickle.dumps(make.Make("batchrl.testing.mock:CountingEnv", 7)))()
    assert isinstance(env, gym.wrappers.TimeLimit) and env._max_episode_steps == 7


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Nope-v0", "unknown env 'Nope-v0'"),
        ("no_such_module:X", "cannot import 'no_such_module'"),
        ("batchrl.testing.mock:Nope", "module 'batchrl.testing.mock' has no 'Nope'"),
        (  # A misspelt class: the module's closest name.
            "batchrl.testing.mock:CountngEnv",
            r"^module 'batchrl.testing.mock' has no 'CountngEnv' and registers no such env for "
            r"env 'batchrl.testing.mock:CountngEnv': did you mean 'batchrl.testing.mock:"
            r"CountingEnv'\?$",
        ),
        ("", r"^env '' names no env: give a Gymnasium id such as 'Pendulum-v1', or 'module:"),
    ],
)
def test_bad_names_are_one_line_errors_before_any_worker_starts(name, message):
    with pytest.raises(ValueError, match=message):
        make.check_name(name)


def test_an_env_package_of_an_extra_not_installed_names_the_extra(monkeypatch):
    # The pointmaze preset's env, without `.[robotics]`.
    monkeypatch.setitem(sys.modules, "gymnasium_robotics", None)
    with pytest.raises(ValueError) as raised:
        make.check_name(presets.get("pointmaze").env)
    said = str(raised.value)
    assert said.startswith("cannot import 'gymnasium_robotics' for env 'gymnasium_robotics:")
    assert said.endswith(": pip install -e '.[robotics]'")


def test_an_extras_command_works_from_any_folder_and_from_an_installed_copy(monkeypatch, tmp_path):
    # Run from another folder, `pip install -e '.[robotics]'` would install that folder.
    monkeypatch.setitem(sys.modules, "gymnasium_robotics", None)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as raised:
        make.check_name(presets.get("pointmaze").env)
    command = str(raised.value).rpartition(": ")[2]
    assert command == f"pip install -e '{extras.CHECKOUT}[robotics]'"
    project = tomllib.loads((extras.CHECKOUT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "batchrl" and "robotics" in project["optional-dependencies"]
    # A copy installed from a wheel has no checkout above its package: the project's name.
    monkeypatch.setattr(extras, "CHECKOUT", tmp_path)
    with pytest.raises(ValueError) as raised:
        make.check_name(presets.get("pointmaze").env)
    assert str(raised.value).endswith(": pip install 'batchrl[robotics]'")


def test_batch_of_an_unknown_id_fails_before_starting_workers():
    with pytest.raises(ValueError, match="unknown env 'Nope-v0'") as raised:
        BatchEnv.external("Nope-v0", 2)
    # How to give an id that a module registers, for a process that never imported it.
    assert str(raised.value).endswith(
        "(an id your module registers: give env='<module>:Nope-v0', which imports it first)"
    )


@pytest.mark.parametrize(
    ("name", "gymnasium_says"),
    [
        ("Taxi-v3", "Environment version v3 for `Taxi` is deprecated. Please use `Taxi-v4`"),
        ("CartPole-v9", "Environment version `v9` for environment `CartPole` doesn't exist."),
    ],
)
def test_another_version_of_a_known_env_is_named_without_the_module_hint(name, gymnasium_says):
    with pytest.raises(ValueError) as raised:
        make.check_name(name)
    said = str(raised.value)
    assert said.startswith(f"unknown env {name!r}: {gymnasium_says}")
    assert "module" not in said


def test_training_envs_repeat_actions_as_the_config_asks():
    single = make.Make("Pendulum-v1", 7)()
    repeated = pickle.loads(pickle.dumps(make.Make("Pendulum-v1", 7, action_repeat=3)))()
    single.reset(seed=0)
    repeated.reset(seed=0)
    action = np.ones(single.action_space.shape, np.float32)
    rewards = [single.step(action)[1] for _ in range(7)]
    first, second, third = (repeated.step(action) for _ in range(3))
    assert first[1] == pytest.approx(sum(rewards[:3]))
    assert second[1] == pytest.approx(sum(rewards[3:6]))
    # The time limit counts the env's own steps: the third action ends after one.
    assert third[1] == pytest.approx(rewards[6]) and third[3]
    with pytest.raises(ValueError, match="action_repeat must be at least 1, got 0"):
        make.Make("Pendulum-v1", action_repeat=0)


def test_env_kwargs_reach_the_env_in_its_worker():
    config = overrides.parse_override(
        presets.get("ant_clipped"), "env_kwargs={include_cfrc_ext_in_observation: true}"
    )
    config = train_config.replace(config, num_envs=2)
    _, batch_env = environments.build(config)
    try:
        assert batch_env.observation_space.shape[-1] == 105  # 27 and the contact forces.
        assert batch_env.reset(seed=0)[0].shape == (2, 105)
    finally:
        batch_env.close()
    pendulum = pickle.loads(pickle.dumps(make.Make("Pendulum-v1", 200, kwargs={"g": 2.0})))()
    assert pendulum.unwrapped.g == 2.0


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        (
            "Pendulum-v1",
            {"gravity": 2.0},
            "env 'Pendulum-v1' takes no keyword 'gravity' in env_kwargs: it takes render_mode, g",
        ),
        ("batchrl.testing.mock:CountingEnv", {"x": 1}, "takes no keyword 'x'"),
        *(
            (
                env,
                {"max_episode_steps": 50},
                r"takes no keyword 'max_episode_steps' in env_kwargs: "
                r"its episodes' step limit is the setting max_length$",
            )
            for env in ("CartPole-v1", "HalfCheetah-v5")  # HalfCheetah takes **kwargs.
        ),
    ],
)
def test_unknown_env_kwargs_are_one_line_errors_before_any_worker_starts(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make.check_name(name, kwargs)


def test_an_ale_id_is_made_where_ale_py_was_never_imported():
    # Gymnasium 1 loads no plugins: "Namespace ALE not found. Have you installed the proper
    # package?" with ale-py installed, in a worker or a run on worker processes.
    script = (
        "import sys\n"
        "from batchrl.envs.host import make\n"
        "assert 'ale_py' not in sys.modules\n"
        "make.check_name('ALE/Pong-v5')\n"
        "env = make.Make('ALE/Pong-v5', max_length=100)()\n"
        "print(env.spec.id, env.spec.max_episode_steps)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ALE/Pong-v5 100\n"


_REGISTERING_SCRIPT = """
import sys
import gymnasium as gym
import numpy as np
from batchrl.envs import BatchEnv


class Counting(gym.Env):
    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = int(self.np_random.integers(10))
        return np.array([self.t], np.float32), {}

    def step(self, action):
        self.t += 1 + int(action)
        return np.array([self.t], np.float32), 1.0, False, False, {}


if __name__ == "__main__":  # Registered here only: no worker runs this block.
    gym.register("CountingObj-v0", entry_point=Counting, max_episode_steps=3)
    gym.register("CountingStr-v0", entry_point="__main__:Counting", max_episode_steps=3)
    # A variant of one of Gymnasium's envs: its entry point is Gymnasium's, its id is not.
    cartpole = "gymnasium.envs.classic_control.cartpole:CartPoleEnv"
    gym.register("ShortCartPole-v0", entry_point=cartpole, max_episode_steps=3)
    sys.path.insert(0, sys.argv[1])
    import counting_module  # Registers CountingMod-v0 as it is imported.

    for name in ("CountingObj-v0", "CountingStr-v0", "CountingMod-v0", "ShortCartPole-v0"):
        with BatchEnv.external(name, 2) as ours:
            sync = gym.make_vec(name, 2, vectorization_mode="sync")
            for got, want in ((ours.reset(seed=5), sync.reset(seed=5)),):
                assert np.array_equal(got[0], want[0])
            ends = []
            for t in range(4):
                got, want = ours.step(np.array([1, 0])), sync.step(np.array([1, 0]))
                for a, b in zip(got[:4], want[:4]):
                    assert np.array_equal(a, b), (name, t, got, want)
                ends.append(bool(got[3][0]))
            print(name, ends)
"""


def test_an_id_registered_where_no_worker_runs_is_made_there_as_sync_makes_it(tmp_path):
    # Registered under the script's guard, in a notebook or by a module imported there, the id
    # was unknown to the workers ("Environment `CountingObj` doesn't exist"), where a forked
    # AsyncVectorEnv's had it.
    (tmp_path / "counting_module.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('CountingMod-v0', entry_point='counting_script:Counting',"
        " max_episode_steps=3)\n"
    )
    (tmp_path / "counting_script.py").write_text(_REGISTERING_SCRIPT)
    script = tmp_path / "counting_script.py"
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    names = ("CountingObj-v0", "CountingStr-v0", "CountingMod-v0", "ShortCartPole-v0")
    # Equal to SyncVectorEnv's, step by step; truncated at the registered limit of 3.
    assert result.stdout.splitlines() == [f"{name} [False, False, True, False]" for name in names]
