"""The SB3 adapter: the same steps as SB3's DummyVecEnv, and SB3's PPO trains the same on it."""

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import data_equivalence
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

import batchrl
from batchrl.envs import BatchEnv
from batchrl.envs.host import sb3
from batchrl.testing import mock
from batchrl.training import api_test


def assert_same_info(ours, theirs, where):
    assert ours.keys() == theirs.keys(), where
    for key, value in theirs.items():
        np.testing.assert_array_equal(ours[key], value, err_msg=f"{where}, {key}")


def workers(env_id):
    return BatchEnv.external(env_id, 3, envs_per_worker=2, local_envs=1)


def mujoco_batch(env_id):
    return BatchEnv.mujoco(env_id, 3)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env_id", "steps", "build"),
    [("Pendulum-v1", 450, workers), ("Hopper-v5", 300, workers), ("Hopper-v5", 300, mujoco_batch)],
)
def test_steps_as_sb3_dummy_vec_env(env_id, steps, build):
    theirs = DummyVecEnv([lambda: gym.make(env_id)] * 3)
    ours = sb3.VecEnv(build(env_id))
    ours.seed(5)
    theirs.seed(5)
    np.testing.assert_array_equal(ours.reset(), theirs.reset())
    for a, b in zip(ours.reset_infos, theirs.reset_infos, strict=True):
        assert_same_info(a, b, "reset")
    rng = np.random.default_rng(0)
    space = theirs.action_space
    ends = 0
    for t in range(steps):
        action = rng.uniform(space.low, space.high, (3, *space.shape)).astype(space.dtype)
        got, want = ours.step(action), theirs.step(action)
        for name, a, b in zip(("obs", "reward", "dones"), got[:3], want[:3], strict=True):
            assert a.dtype == b.dtype, name
            np.testing.assert_array_equal(a, b, err_msg=f"{name} at step {t}")
        for i, (a, b) in enumerate(zip(got[3], want[3], strict=True)):
            assert_same_info(a, b, f"info of env {i} at step {t}")
        ends += int(want[2].sum())
        for a, b in zip(ours.reset_infos, theirs.reset_infos, strict=True):
            assert_same_info(a, b, f"reset infos at step {t}")
    assert ends >= 3
    ours.close()
    theirs.close()
    assert ours.batch_env.closed


@pytest.mark.slow
def test_sb3_ppo_learns_the_same_on_it_as_on_dummy_vec_env():
    def train(venv):
        model = PPO("MlpPolicy", VecMonitor(venv), n_steps=128, batch_size=128, n_epochs=2, seed=0)
        model.learn(1024)
        params = torch.nn.utils.parameters_to_vector(model.policy.parameters()).detach()
        episodes = [info["r"] for info in model.ep_info_buffer]
        venv.close()
        return params.numpy(), episodes

    ours = train(sb3.VecEnv(BatchEnv.external("CartPole-v1", 4)))
    theirs = train(DummyVecEnv([lambda: gym.make("CartPole-v1")] * 4))
    assert len(ours[1]) >= 20  # Episodes ended, were reset and counted.
    assert ours[1] == theirs[1]
    np.testing.assert_array_equal(ours[0], theirs[0])


def test_attributes_methods_and_wrappers_reach_the_chosen_envs():
    venv = sb3.VecEnv(BatchEnv.external("Pendulum-v1", 3, envs_per_worker=2))
    try:
        assert venv.get_attr("max_speed") == [8.0, 8.0, 8.0]
        venv.set_attr("max_speed", 5.0, indices=[0, 2])
        assert venv.get_attr("max_speed") == [5.0, 8.0, 5.0]
        assert venv.get_attr("max_speed", indices=1) == [8.0]
        assert venv.env_method("get_wrapper_attr", "max_speed", indices=[2]) == [5.0]
        # A keyword `name` of the method's own, and a negative index, as DummyVecEnv's.
        assert venv.env_method("get_wrapper_attr", name="max_speed", indices=-1) == [5.0]
        venv.env_method("set_wrapper_attr", name="max_speed", value=4.0, indices=[-2])
        assert venv.get_attr("max_speed") == [5.0, 4.0, 5.0]
        # The envs step with it (SB3's own VecEnvs set it on a wrapper the env never reads).
        venv.set_attr("max_speed", 0.5, indices=[0, 1])
        venv.seed(0)
        venv.reset()
        speeds = np.abs([venv.step(np.full((3, 1), 2.0, np.float32))[0][:, 2] for _ in range(20)])
        assert speeds[:, :2].max() == 0.5 and speeds[:, 2].max() > 1
        assert venv.env_is_wrapped(gym.wrappers.TimeLimit) == [True, True, True]
        assert venv.env_is_wrapped(gym.wrappers.RecordVideo, indices=[0]) == [False]
        # Asked of the envs in their workers, as of DummyVecEnv's here.
        assert venv.has_attr("max_speed") and not venv.has_attr("no_such_attribute")
        with pytest.raises(AttributeError, match="no attribute 'no_such_attribute'"):
            venv.get_attr("no_such_attribute")
        with pytest.raises(TypeError, match="got a mask of bools"):  # Set envs 0 and 1.
            venv.set_attr("max_speed", 1.0, indices=[False, True, False])
    finally:
        venv.close()
    with pytest.raises(TypeError, match="VecEnv wraps a batchrl BatchEnv, got DummyVecEnv"):
        sb3.VecEnv(DummyVecEnv([lambda: gym.make("Pendulum-v1")]))
    with pytest.raises(TypeError, match=r"got a list of env constructors: .*BatchEnv.external"):
        sb3.VecEnv([lambda: gym.make("Pendulum-v1")] * 2)  # SubprocVecEnv's way.
    with BatchEnv.external("Pendulum-v1", 1) as batch_env:
        wrapped = gym.wrappers.vector.ClipAction(batch_env)
        refused = r"^VecEnv wraps a batchrl BatchEnv, got ClipAction, a Gymnasium vector wrapper"
        with pytest.raises(TypeError, match=refused):
            sb3.VecEnv(wrapped)  # Its steps would pass the wrapper by.


def _without_autoreset_mode(metadata: dict) -> dict:
    return {key: value for key, value in metadata.items() if key != "autoreset_mode"}


def test_step_async_starts_the_envs_steps_as_subproc_vec_env_does(tmp_path):
    # It kept the actions for step_wait: a loop that computed between the halves, as
    # SubprocVecEnv lets it, waited for the whole step after. Each step waits for the gate.
    gate = tmp_path / "gate"
    make = functools.partial(mock.CountingEnv, step_gate=str(gate))
    venv = sb3.VecEnv(BatchEnv.external([make] * 2, envs_per_worker=1))
    try:
        venv.reset()
        groups = venv.batch_env.groups
        assert all(group.ready(0.0) for group in groups)  # Nothing in flight: ready at once.
        venv.step_async(np.zeros((2, 2), np.float32))
        assert not any(group.ready(0.0) for group in groups)  # Each worker's step in flight.
        gate.touch()
        obs, reward, _, _ = venv.step_wait()
        assert reward.tolist() == [1.0, 1.0] and obs[:, 0].tolist() == [1.0, 1.0]
        with pytest.raises(RuntimeError, match=r"^step_wait without step_async"):
            venv.step_wait()
    finally:
        venv.close()


def test_a_restarted_envs_terminal_observation_is_its_episodes_last(tmp_path):
    # It was the next episode's first, which SB3 bootstraps a truncation from.
    constructors = [
        functools.partial(mock.CountingEnv, duration=100),
        functools.partial(mock.FailingEnv, how="exit", at=2, duration=100),
    ]
    venv = sb3.VecEnv(BatchEnv.external(constructors, envs_per_worker=1, restart=True))
    try:
        venv.reset()
        before, *_ = venv.step(np.zeros((2, 2), np.float32))
        obs, _, done, infos = venv.step(np.zeros((2, 2), np.float32))
        assert done.tolist() == [False, True] and infos[1]["restarted"]
        assert infos[1]["TimeLimit.truncated"]
        np.testing.assert_array_equal(infos[1]["terminal_observation"], before[1])
        assert obs[1, 0] == 0  # The step's obs begins the next episode.
    finally:
        venv.close()


def test_metadata_and_images_are_the_envs_as_on_dummy_vec_env():
    def make():
        return gym.make("CartPole-v1", render_mode="rgb_array")

    ours = sb3.VecEnv(BatchEnv.external(make, 2, envs_per_worker=1, local_envs=1))
    theirs = DummyVecEnv([make] * 2)
    try:
        # VecVideoRecorder films at the metadata's render_fps (CartPole's 50, not 30). A
        # SyncVectorEnv made earlier in this process wrote its autoreset_mode into the env
        # class's metadata, which DummyVecEnv hands on as it is: the env's own keys compared.
        assert _without_autoreset_mode(ours.metadata) == _without_autoreset_mode(theirs.metadata)
        assert ours.metadata["render_fps"] == 50
        for venv in (ours, theirs):
            venv.seed(3)
            venv.reset()
        assert ours.render_mode == theirs.render_mode == "rgb_array"
        np.testing.assert_array_equal(ours.render(), theirs.render())
    finally:
        ours.close()
        theirs.close()


def test_fractional_actions_of_an_integer_space_are_refused_not_truncated():
    venv = sb3.VecEnv(BatchEnv.external("CartPole-v1", 2, envs_per_worker=1, local_envs=1))
    try:
        venv.seed(0)
        venv.reset()
        for fraction in (0.7, np.nan):
            refused = rf"^action {fraction} does not fit the action space Discrete\(2\): it takes"
            with pytest.raises(TypeError, match=refused):
                venv.step(np.array([fraction, 1.0]))
        # Whole floats step as integers: SB3's PPO sends MultiBinary actions so.
        pushed = venv.step(np.array([0.0, 1.0], np.float32))[0]
        venv.seed(0)
        venv.reset()
        np.testing.assert_array_equal(pushed, venv.step(np.array([0, 1]))[0])
    finally:
        venv.close()


def test_options_set_per_env_reach_each_env_as_on_dummy_vec_env():
    ours = sb3.VecEnv(BatchEnv.external("Pendulum-v1", 3, envs_per_worker=2, local_envs=1))
    theirs = DummyVecEnv([lambda: gym.make("Pendulum-v1")] * 3)
    try:
        per_env = [{"x_init": 0.1, "y_init": 0.1}, {}, {"x_init": np.pi, "y_init": 8.0}]
        starts = []
        # None for an env, as SB3's VecEnvs read it: no options.
        with_none = [None, {"x_init": 0.2, "y_init": 0.3}, None]
        for options in (per_env, {"x_init": 0.2, "y_init": 0.3}, None, with_none):
            for venv in (ours, theirs):
                venv.seed(7)
                venv.set_options(options)
            got, want = ours.reset(), theirs.reset()
            np.testing.assert_array_equal(got, want, err_msg=f"options {options}")
            assert ours.reset_infos == theirs.reset_infos
            starts.append(got)
        # Same seeds: only the envs given options start elsewhere than with none.
        assert [np.array_equal(a, b) for a, b in zip(starts[0], starts[2], strict=True)] == [
            0,
            1,
            0,
        ]
    finally:
        ours.close()
        theirs.close()


def test_options_for_too_few_or_too_many_envs_are_refused_in_one_line():
    venv = sb3.VecEnv(BatchEnv.external("Pendulum-v1", 3, envs_per_worker=2, local_envs=1))
    try:
        for options in ([{"x_init": 0.1, "y_init": 0.1}], [{}, {}, {}, {}]):
            refused = (
                rf"^set_options takes .* list of 3 \(one per env\), got a list of {len(options)}$"
            )
            with pytest.raises(ValueError, match=refused):
                venv.set_options(options)
        venv.set_options([{}, None, {"x_init": 0.1, "y_init": 0.1}])  # One per env.
        assert venv.reset().shape == (3, 3)
    finally:
        venv.close()


_DICT = gym.spaces.Dict(
    {
        "cue": gym.spaces.Discrete(4, start=1),
        "frame": gym.spaces.Box(0, 255, (3, 4, 2), np.uint8),
        "left": gym.spaces.MultiDiscrete([5, 2]),
    }
)


def test_a_dict_observation_steps_as_on_dummy_vec_env():
    # Partials of batchrl.testing's env, which workers import without torch and SB3.
    makers = [functools.partial(mock.SpaceEnv, _DICT, gym.spaces.Discrete(3), d) for d in (1, 2, 3)]
    ours = sb3.VecEnv(BatchEnv.external(makers, envs_per_worker=2, local_envs=1))
    theirs = DummyVecEnv(makers)
    ours.seed(5)
    theirs.seed(5)
    assert data_equivalence(ours.reset(), dict(theirs.reset()), exact=True)
    rng = np.random.default_rng(0)
    for t in range(7):
        action = rng.integers(0, 3, 3)
        got, want = ours.step(action), theirs.step(action)
        assert data_equivalence(got[0], dict(want[0]), exact=True), f"obs at step {t}"
        for name, a, b in zip(("reward", "dones"), got[1:3], want[1:3], strict=True):
            assert a.dtype == b.dtype, name
            np.testing.assert_array_equal(a, b, err_msg=f"{name} at step {t}")
        assert data_equivalence(got[3], want[3], exact=True), f"infos at step {t}"
    assert "terminal_observation" in got[3][0]  # Env 0 ends every step.
    ours.close()
    theirs.close()


def test_tuple_and_nested_dict_observations_are_refused_in_one_line():
    pair = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)))
    nested = gym.spaces.Dict({"inner": gym.spaces.Dict({"a": gym.spaces.Discrete(2)})})
    for space, where in [(pair, "obs is a Tuple"), (nested, r'obs\["inner"\] is a Dict inside')]:
        batch_env = BatchEnv.from_envs([mock.SpaceEnv(space)])
        with pytest.raises(TypeError, match=rf"^SB3 does not take Tuple .*\({where}") as refused:
            sb3.VecEnv(batch_env)
        assert "\n" not in str(refused.value)
        batch_env.close()


@pytest.mark.parametrize("preset", ["pendulum_jax", "cartpole_jax"])
def test_sb3s_evaluate_policy_scores_a_trained_policy_as_its_own_act_does(preset):
    run = batchrl.train(preset, steps=400, **api_test.TINY_PENALTY)
    env_id, policy = run.config.env, run.policy
    venv = DummyVecEnv([lambda: gym.make(env_id)] * 2)
    venv.seed(5)  # Env i seeded 5 + i, as a Gymnasium vector env's reset(seed=5) seeds it.
    returns, lengths = evaluate_policy(
        policy, venv, n_eval_episodes=2, return_episode_rewards=True, warn=False
    )
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * 2)
    obs, _ = envs.reset(seed=5)
    want, steps, done = np.zeros(2), np.zeros(2, int), np.zeros(2, bool)
    while not done.all():
        obs, reward, terminated, truncated, _ = envs.step(policy.act(obs))
        want += np.where(done, 0.0, reward.astype(np.float32))
        steps += ~done
        done |= terminated | truncated
    order = np.argsort(steps, kind="stable")  # SB3 lists episodes in the order they end.
    np.testing.assert_allclose(returns, want[order], rtol=1e-6)
    assert lengths == list(steps[order])
