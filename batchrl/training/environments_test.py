import dataclasses
import functools
import os
import pathlib
import signal
import sys
import threading
import time

import gymnasium as gym
import jax.numpy as jnp
import numpy as np
import psutil
import pytest
from gymnax.environments.classic_control import acrobot

import batchrl
from batchrl import env_spec
from batchrl.bridge import ale_ffi
from batchrl.configs import TrainConfig, presets, train_config
from batchrl.conftest import wait_gone
from batchrl.envs import EnvTimeoutError
from batchrl.envs.atari import atari_group
from batchrl.envs.host import lifecycle
from batchrl.envs.jax import classic as jax_classic
from batchrl.training import env_probe, environments

FIRE = 1  # In Space Invaders' minimal action set.


def atari(env="ALE/SpaceInvaders-v5", **fields):
    """A run on 2 Atari games whose lost lives end episodes and whose rewards are clipped."""
    options = {"life_loss_info": True, "reward_clipping": True, "repeat_action_probability": 0.0}
    settings = {"num_envs": 2, "max_length": 1000, "env_kwargs": options, **fields}
    return TrainConfig(env=env, **{"backend": "ale", **settings})


def test_the_ale_backend_is_one_batch_of_ale_pys_games_read_as_stacked_frames():
    config = atari(max_length=50, env_kwargs={"frameskip": 3})
    spec = environments.check_env(config)
    (frames,) = env_spec.leaves(spec.observation)
    assert frames.shape == (4, 84, 84) and frames.dtype == "uint8"
    assert frames.kind == env_spec.IMAGE and spec.num_actions == 6
    batched, batch_env = environments.build(config)
    with batch_env:
        (games,) = batch_env._groups
        assert isinstance(games, atari_group.AtariGroup) and batched.num_envs == 2
        # Compiled code steps the games through ale-py's XLA calls, not the bridge.
        assert isinstance(batched, ale_ffi.AleFfiBatch) and batched.batch_env is batch_env
        # Episodes end at max_length steps of 3 frames each.
        assert games.settings.options["max_num_frames_per_episode"] == 150
        assert games.settings.options["frameskip"] == 3


def play(batch_env, steps):
    """FIRE for `steps` steps from a seeded reset, resetting what ended; rewards and ends."""
    batch_env.reset(seed=5)
    rewards, lives_at_ends = [], []
    for _ in range(steps):
        _, reward, terminated, truncated, infos = batch_env.step(np.full(2, FIRE))
        rewards.append(reward)
        lives_at_ends += infos["lives"][terminated | truncated].tolist()
        if (terminated | truncated).any():
            batch_env.reset_at(np.flatnonzero(terminated | truncated))
    return np.array(rewards), lives_at_ends


def test_evaluation_plays_whole_games_with_the_games_own_rewards():
    # Space Invaders pays 5 to 30 a hit and has three lives; FIRE all along loses them fast.
    config = atari()
    _, train_env = environments.build(config)
    evaluated, eval_env = environments.build_eval(config)
    assert isinstance(evaluated, ale_ffi.AleFfiBatch) and evaluated.seed == config.seed + 2**32
    with train_env, eval_env:
        train_rewards, train_ends = play(train_env, 800)
        eval_rewards, eval_ends = play(eval_env, 800)
    assert set(np.unique(train_rewards)) <= {0.0, 1.0}
    assert 2 in train_ends and 1 in train_ends  # Lost lives end training's episodes.
    assert eval_rewards.max() > 1.0
    assert eval_ends and set(eval_ends) == {0}  # Only game overs end evaluation's.
    assert environments.build_eval(TrainConfig(env="CartPole-v1")) is None


def test_a_bad_game_or_option_is_refused_in_one_line_before_any_game_starts():
    with pytest.raises(ValueError, match=r"unknown option 'episodic_lives' of BatchEnv.atari"):
        environments.check_env_name(atari(env_kwargs={"episodic_lives": True}))
    with pytest.raises(ValueError, match=r"unknown Atari game 'ALE/Braekout-v5'"):
        environments.check_env_name(atari(env="ALE/Braekout-v5"))
    with pytest.raises(ValueError, match=r"backend='ale' builds its envs by name"):
        environments.check_env_name(atari(), env=lambda: None)
    # An Atari preset moved to worker envs: its options were blamed as the user's own.
    with pytest.raises(ValueError, match=r"; those given are BatchEnv.atari's \(backend='ale'"):
        environments.check_env_name(atari(backend="processes"))


@pytest.mark.parametrize(
    ("preset", "settings", "module", "message"),
    [
        ("breakout_minatar", {}, "gymnax", "backend 'gymnax' needs gymnax"),
        ("minigrid_doorkey", {}, "minigrid", "MiniGrid's envs need minigrid"),
        # The train command printed ImportError's traceback.
        ("cartpole", {"backend": "ray"}, "ray", "backend 'ray' needs ray"),
        ("cheetah_clipped", {"rollout_actors": 2}, "ray", "rollout_actors=2 needs ray"),
    ],
)
def test_an_extra_not_installed_is_one_line_naming_it(
    monkeypatch, preset, settings, module, message
):
    monkeypatch.setitem(sys.modules, module, None)  # Its import fails as if not installed.
    config = dataclasses.replace(presets.get(preset), **settings)
    said = rf"^{message}, which is not installed: pip install -e '\.\[{module}\]'$"
    with pytest.raises(ValueError, match=said):
        environments.check_env(config)


NOT_AN_ENV = 2.0


def not_an_env():
    return "an env"


class NoSpaces(gym.Env):
    def __init__(self):
        self.action_space = gym.spaces.Discrete(2)


class FailingToBuild(gym.Env):
    def __init__(self):
        raise KeyError("no such level")


class GymnaxLike:  # gymnax's `Environment`'s own methods.
    def step_env(self, key, state, action, params): ...

    def reset_env(self, key, params): ...


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("NOT_AN_ENV", "is a float, not an env class or a function that returns an env"),
        ("not_an_env", "returned a str, not a gymnasium.Env"),
        ("NoSpaces", "has no observation_space: a Gymnasium env sets both in its __init__"),
        # A traceback for these two; the env's own ValueError read as batchrl's refusal.
        ("FailingToBuild", r"raised KeyError as it was built: 'no such level' \(.*_test\.py:\d+\)"),
        (
            "GymnaxLike",
            "returned a GymnaxLike, not a gymnasium.Env: gymnax's envs train by "
            "their id with backend=gymnax",
        ),
        (
            "batchrl.envs.jax.classic:Pendulum",
            "returned a Pendulum, not a gymnasium.Env: a JAX-native env trains with backend=jax",
        ),
    ],
)
def test_an_env_that_cannot_be_built_is_named_in_one_line(name, message):
    env = name if ":" in name else f"{__name__}:{name}"
    config = dataclasses.replace(presets.get("pendulum"), env=env)
    with pytest.raises(ValueError, match=f"^env '{env}' {message}$"):
        environments.check_env(config)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        # Its traceback ran through batchrl's internals; a Gymnasium env's is one line.
        (
            f"{__name__}:FailingToBuild",
            r"env '.*:FailingToBuild' raised KeyError as it was "
            r"built: 'no such level' \(.*_test\.py:\d+\)",
        ),
        (
            "Point",
            r"unknown JAX-native env 'Point'; known: CartPole-v1, Pendulum-v1 \(gymnax's "
            r"envs with backend=gymnax, an env of your own as module:Class\)",
        ),
    ],
)
def test_a_jax_native_env_that_cannot_be_made_is_named_in_one_line(name, message):
    config = dataclasses.replace(presets.get("pendulum_jax"), env=name)
    with pytest.raises(ValueError, match=f"^{message}$"):
        environments.check_env(config)


class WaitingForItsServer(gym.Wrapper):
    """Pendulum-v1 whose constructor sleeps `seconds`, as one waiting for a simulator."""

    def __init__(self, seconds: float):
        time.sleep(seconds)
        super().__init__(gym.make("Pendulum-v1"))


def test_an_env_whose_constructor_hangs_is_said_then_ended_in_one_line(caplog, monkeypatch):
    # Built in the train command's own process to read its spaces, it hung the command
    # for good before it printed a line; a worker gets START_TIMEOUT to build its envs.
    monkeypatch.setattr(lifecycle, "START_TIMEOUT", 1.0)
    monkeypatch.setattr(env_probe, "SAY_AFTER", 0.3)
    env = f"{__name__}:WaitingForItsServer"
    config = dataclasses.replace(
        presets.get("pendulum"), env=env, env_kwargs={"seconds": 600}, worker_timeout=0.5
    )
    # pytest-timeout's SIGALRM handler, as a user's own, would be left alone (below).
    timeout_handler = signal.signal(signal.SIGALRM, signal.SIG_DFL)
    try:
        with pytest.raises(ValueError) as refused:
            environments.check_env(config)
        assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL  # As it was.
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.signal(signal.SIGALRM, timeout_handler)
    assert str(refused.value) == (
        f"env {env!r} did not return from its constructor within 1 s, built in this process "
        "to read its spaces as a worker would: a larger worker_timeout gives both longer"
    )
    assert [record.getMessage() for record in caplog.records] == [
        f"env {env!r} has not returned from its constructor after 0.3 s (built in this "
        "process to read its spaces); waiting up to 1 s"
    ]
    # A user's own SIGALRM handler is left alone, and a slow build waited for.
    caplog.clear()
    own = lambda signum, frame: None  # noqa: E731
    monkeypatch.setattr(lifecycle, "START_TIMEOUT", 0.2)
    previous = signal.signal(signal.SIGALRM, own)
    try:
        slow = dataclasses.replace(config, env_kwargs={"seconds": 0.5})
        assert environments.check_env(slow).action_shape == (1,)
        assert signal.getsignal(signal.SIGALRM) is own and not caplog.records
    finally:
        signal.signal(signal.SIGALRM, previous)


class ClosingBadly(gym.Wrapper):
    """Pendulum-v1 whose `close` raises, or hangs until `released` is set."""

    released = threading.Event()

    def __init__(self, hang: bool = False):
        super().__init__(gym.make("Pendulum-v1"))
        self.hang = hang

    def close(self):
        if self.hang:
            ClosingBadly.released.wait()
        raise RuntimeError("boom in close")


@pytest.mark.parametrize(
    ("hang", "said"),
    [
        (False, "raised RuntimeError in close(): boom in close"),
        (True, "did not return from close() within 0.5 s; left open"),
    ],
)
def test_an_env_whose_close_raises_or_hangs_is_said_and_the_run_goes_on(caplog, hang, said):
    # The env built to read the spaces: its close's traceback stopped the train command,
    # and a hang kept it for good, where a worker's close is one the run goes on past.
    env = f"{__name__}:ClosingBadly"
    config = dataclasses.replace(
        presets.get("pendulum"), env=env, env_kwargs={"hang": hang}, worker_timeout=0.5
    )
    ClosingBadly.released.clear()  # A close that hangs returns once the check is over.
    try:
        spec = environments.check_env(config)
    finally:
        ClosingBadly.released.set()
    assert spec.action_shape == (1,)
    assert [record.getMessage() for record in caplog.records] == [f"env {env!r} {said}"]


def normalised_pendulum():
    """Pendulum-v1 in Gymnasium's normalisers, as a user's make function may return it."""
    return gym.wrappers.NormalizeObservation(gym.wrappers.NormalizeReward(gym.make("Pendulum-v1")))


@pytest.mark.parametrize("normalize_rewards", [True, False])
def test_a_normaliser_in_the_envs_wrappers_that_batchrl_repeats_is_said(caplog, normalize_rewards):
    # The learner normalises inside the program: a user's NormalizeReward made the
    # returns reported its normalised ones, and rewards were normalised twice, unsaid.
    env = f"{__name__}:normalised_pendulum"
    config = presets.get("pendulum")
    config = train_config.set_fields(
        config, [("env", env), ("normalize_rewards", normalize_rewards)], train_config.typed
    )
    assert environments.check_env(config).action_shape == (1,)
    said = [
        f"env {env!r} is wrapped in {wrapper} and {setting}=true normalises again: set "
        f"{setting}=false or drop the wrapper"
        for wrapper, setting in [
            ("NormalizeObservation", "normalize_observations"),
            ("NormalizeReward", "normalize_rewards"),
        ]
    ]
    assert [record.getMessage() for record in caplog.records] == said[: 1 + normalize_rewards]


@pytest.mark.parametrize("preset", ["pendulum", "pendulum_jax"])
@pytest.mark.parametrize("max_length", [400, 10_000_000])
def test_a_max_length_beyond_the_envs_own_limit_is_said_and_the_limit_taken(
    caplog, preset, max_length
):
    # Gymnasium's max_episode_steps lifts an id's limit; max_length ended episodes at the
    # smaller of the two, unsaid, so a run asking for 400 steps got Pendulum's 200. And
    # max_length still sized phases and eval rounds: 10,000,000 ran out of memory.
    config = train_config.replace(presets.get(preset), max_length=max_length)
    checked, spec = environments.check_run(config)
    assert [record.getMessage() for record in caplog.records] == [
        "env 'Pendulum-v1' ends its episodes at its own limit of 200 steps, below "
        f"max_length={max_length}: max_length=200 is taken"
    ]
    assert spec == environments.check_env(config)
    own = presets.get(preset)  # Its max_length is the env's own limit.
    assert (checked.max_length, own.max_length) == (200, 200)
    assert checked.batch_steps_per_phase == own.batch_steps_per_phase
    assert checked.eval_batch_steps == own.eval_batch_steps == 200


@pytest.mark.parametrize("preset", ["pendulum", "pendulum_jax"])
def test_a_max_length_that_cuts_the_envs_episodes_is_said(caplog, preset):
    # An env named in a preset's place (`--set env=...`) of a longer limit than the preset's
    # max_length trained on episodes cut short, unsaid; given as an object, it did not.
    config = train_config.replace(presets.get(preset), max_length=100)
    checked, _ = environments.check_run(config)
    assert checked.max_length == 100
    assert [record.getMessage() for record in caplog.records] == [
        "env 'Pendulum-v1' has its own limit of 200 steps, above max_length=100: its episodes "
        "are cut (truncated) there"
    ]


class StateIds(gym.Env):
    """Observations as ids of states, `n` of them, and a `Discrete(3)` beside them."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, n: int = 1_000_000):
        counts = (gym.spaces.Discrete(n), gym.spaces.MultiDiscrete([3, n]))
        self.observation_space = gym.spaces.Tuple(counts)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, True, False, {}


@pytest.mark.parametrize("n", [9_997, 1_000_000])
def test_counts_one_hot_encoded_into_many_inputs_are_said(caplog, n):
    # A Discrete(1_000_000) state id trained at 41 steps/s in 8 GiB, unsaid.
    config = train_config.replace(
        presets.get("cartpole"), env=f"{__name__}:StateIds", env_kwargs={"n": n}
    )
    environments.check_run(config)
    said = [record.getMessage() for record in caplog.records]
    assert said == (
        []
        if n == 9_997
        else [
            f"obs[0]: its counts are one-hot encoded into {n:,} inputs a step: give it as a "
            "Box, or features of it, with a wrapper",
            f"obs[1]: its counts are one-hot encoded into {n + 3:,} inputs a step: give it as "
            "a Box, or features of it, with a wrapper",
        ]
    )


def cartpole_of_50() -> gym.Env:
    """CartPole with a step limit of its own, below the `cartpole` preset's 500."""
    return gym.make("CartPole-v1", max_episode_steps=50)


@pytest.mark.parametrize("given", ["constructor", "name"])
def test_the_step_limit_a_constructor_sets_is_taken_as_an_ids_is(caplog, given):
    # Only an id's registered limit was read: a constructor's env of 50 steps kept the
    # preset's 500, and its phases, episode memory and eval rounds were sized ten times over.
    config = presets.get("cartpole")
    env = cartpole_of_50
    if given == "name":
        config, env = train_config.replace(config, env=f"{__name__}:cartpole_of_50"), None
    checked, _ = environments.check_run(config, env)
    assert [record.getMessage() for record in caplog.records] == [
        f"env {config.env!r} ends its episodes at its own limit of 50 steps, below "
        "max_length=500: max_length=50 is taken"
    ]
    assert checked.max_length == 50
    assert checked.batch_steps_per_phase < config.batch_steps_per_phase


@pytest.mark.parametrize(
    ("preset", "settings", "said"),
    [
        (
            "cartpole_jax",
            {"init_std": 5.0, "squash_mean": False, "shared_encoder": True},
            [
                "init_std=5.0 is not used on discrete actions: a categorical policy has no std",
                # squash_mean=False, the clipped objective's default, is nobody's choice.
                "shared_encoder=True is not used on observations without images",
            ],
        ),
        (
            "cheetah_clipped",
            {"init_output_factor": 7.0, "normalize_rewards": False, "reward_clip": 0.1},
            [
                "init_output_factor=7.0 is not used with orthogonal_init: the policy's output "
                "starts at 0.01",
                "reward_clip=0.1 is not used with normalize_rewards off: rewards stay raw",
            ],
        ),
        ("breakout", {"image_channels": "first", "shared_encoder": False}, []),
        # A CNN named on no image is refused, not told "no images" before its refusal.
        ("cartpole_jax", {"cnn": "nature", "shared_encoder": True}, []),
        (
            "pendulum_jax",
            {"recurrent": True, "chunk_length": 20},
            ["chunk_length=20 is not used with recurrent: a GRU policy trains on whole episodes"],
        ),
    ],
)
def test_a_setting_nothing_reads_on_the_env_is_said(preset, settings, said):
    # Each was accepted and changed nothing: init_std=5 on CartPole's categorical policy.
    config = train_config.set_fields(presets.get(preset), settings.items(), train_config.typed)
    assert config.algorithm.unread(environments.check_env(config)) == said


class HangingPendulum(gym.Wrapper):
    """Pendulum-v1 whose `at`-th step never returns; it writes its pid to `marker` first."""

    def __init__(self, marker: pathlib.Path, at: int = 3):
        super().__init__(gym.make("Pendulum-v1"))
        self.marker, self.at, self.steps = marker, at, 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.at:
            self.marker.write_text(str(os.getpid()))
            while True:
                time.sleep(1)
        return super().step(action)


def test_a_worker_that_hangs_after_a_ctrl_c_stops_the_run_as_interrupted(tmp_path, caplog):
    # One Ctrl-C waits for the phase in flight; a worker hung in it failed the run at its
    # timeout (the command's exit 1, the signal unsaid), where it was asked to stop.
    marker = tmp_path / "hung"
    tiny = dict(num_envs=2, envs_per_worker=2, update_every=2, max_length=20, steps=400)
    tiny |= dict(policy_layers=(8,), value_layers=(8,), worker_timeout=1.5, logdir=None)

    def ctrl_c_once_it_hangs():
        while not marker.exists():
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c_once_it_hangs, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        batchrl.train("pendulum", env=functools.partial(HangingPendulum, marker), **tiny)
    (warned,) = [r.getMessage() for r in caplog.records if "the signal asked" in r.getMessage()]
    assert "did not answer step within 1.5 s and was killed" in warned
    assert not wait_gone([int(marker.read_text())])


def test_worker_timeout_is_the_default_of_worker_envs():
    assert TrainConfig().worker_timeout == lifecycle.DEFAULT_TIMEOUT


def test_a_hung_worker_is_reported_after_the_runs_worker_timeout_and_killed(tmp_path):
    marker = tmp_path / "hung"
    tiny = dict(num_envs=2, envs_per_worker=2, update_every=2, max_length=20, steps=400)
    tiny |= dict(policy_layers=(8,), value_layers=(8,), worker_timeout=1.5)
    with pytest.raises(EnvTimeoutError) as raised:
        batchrl.train("pendulum", env=functools.partial(HangingPendulum, marker), **tiny)
    waited = time.time() - marker.stat().st_mtime  # Since the step began to hang.
    assert "did not answer step within 1.5 s and was killed" in str(raised.value)
    assert "\n" not in str(raised.value)
    assert waited < lifecycle.DEFAULT_TIMEOUT / 2  # The run's setting, not the default.
    assert not wait_gone([int(marker.read_text())])
    # Workers are the fork server's children (`lifecycle.DEFAULT_CONTEXT`): none is left.
    servers = [c for c in psutil.Process().children() if "forkserver" in " ".join(c.cmdline())]
    assert servers and not wait_gone([c.pid for s in servers for c in s.children()])


@pytest.mark.parametrize("backend", ["processes", "mujoco"])
def test_a_keyword_a_mujoco_task_does_not_take_is_named_with_those_it_takes(backend):
    # Its v5 env passes **kwargs on to MujocoEnv, whose TypeError named neither.
    config = train_config.replace(
        presets.get("cheetah_clipped"), backend=backend, env_kwargs={"ctrl_cost": 1.0}
    )
    with pytest.raises(ValueError, match=r"^HalfCheetah-v5 takes no keyword 'ctrl_cost': it "):
        environments.check_env_name(config)


@pytest.mark.parametrize(
    ("preset", "kwargs", "read"),
    [
        ("pendulum_jax", {"g": 2.0}, lambda env: env.g),  # As gym.make("Pendulum-v1", g=2.0).
        ("acrobot_gymnax", {"max_steps_in_episode": 20}, lambda env: env.max_length),
    ],
)
def test_env_kwargs_set_a_jax_native_envs_settings(caplog, preset, kwargs, read):
    # Refused before: a parameterised JAX-native env had a run folder only through a
    # module-level factory of its own for each value.
    config = train_config.replace(presets.get(preset), env_kwargs=kwargs)
    checked, _ = environments.check_run(config)
    env, batch_env = environments.build(checked)
    assert batch_env is None and read(env.env.env) == next(iter(kwargs.values()))
    if preset == "acrobot_gymnax":  # Its episodes' limit: the run's max_length too.
        assert checked.max_length == 20 and "max_length=20 is taken" in caplog.text


@pytest.mark.parametrize(
    ("preset", "said"),
    [
        ("pendulum_jax", "env 'Pendulum-v1' takes no keyword 'gg'; its settings: g"),
        ("cartpole_jax", "env 'CartPole-v1' takes no keyword 'gg'; it has no settings"),
        ("acrobot_gymnax", "gymnax env 'Acrobot-v1' has no parameter 'gg'; its parameters: "),
    ],
)
def test_a_jax_native_envs_unknown_keyword_is_one_line_naming_its_settings(preset, said):
    config = train_config.replace(presets.get(preset), env_kwargs={"gg": 1.0})
    with pytest.raises(ValueError) as error:
        environments.check_env(config)
    assert str(error.value).startswith(said) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("preset", "kwargs", "said"),
    [
        ("pendulum_jax", {"g": "x"}, "env 'Pendulum-v1' takes g as a number (its default is 10.0)"),
        (
            "acrobot_gymnax",
            {"max_steps_in_episode": 1.5},
            "gymnax env 'Acrobot-v1' takes max_steps_in_episode as a whole number, got 1.5",
        ),
        (
            "acrobot_gymnax",
            {"max_steps_in_episode": -5},
            "gymnax env 'Acrobot-v1' takes max_steps_in_episode of 1 or more, got -5",
        ),
        (
            "acrobot_gymnax",
            {"max_steps_in_episode": float("inf")},
            "gymnax env 'Acrobot-v1' takes max_steps_in_episode as a whole number, got inf",
        ),
    ],
)
def test_a_jax_native_envs_setting_of_the_wrong_type_is_one_line_before_compiling(
    preset, kwargs, said
):
    # A string for Pendulum's g was a TypeError's traceback from its compiled step; 1.5
    # steps an episode trained episodes of 1, said as the duration's own limit of 1.
    config = train_config.replace(presets.get(preset), env_kwargs=kwargs)
    with pytest.raises(ValueError) as error:
        environments.check_env(config)
    assert str(error.value).startswith(said) and "\n" not in str(error.value)


def test_a_jax_native_envs_settings_of_their_own_kinds_are_taken():
    # A list (Acrobot's torques), a JAX scalar: each taken as before the checks of kinds.
    torques = {"available_torque": [-2.0, 0.0, 2.0], "max_steps_in_episode": 30.0}
    config = train_config.replace(presets.get("acrobot_gymnax"), env_kwargs=torques)
    environments.check_env(config)
    pendulum = jax_classic.make("Pendulum-v1", g=jnp.float32(9.8))
    assert float(pendulum.env.g) == pytest.approx(9.8)


class ShortAcrobot(acrobot.Acrobot):
    """A gymnax `Environment` of a user's own: gymnax's Acrobot of 30 steps an episode."""

    @property
    def default_params(self):
        return super().default_params.replace(max_steps_in_episode=30)


def test_a_gymnax_environment_of_your_own_trains_by_name_and_as_an_object(tmp_path):
    # By name it was "made a ShortAcrobot, not a JAX-native env", as an object "has reset
    # and step but no env_spec or max_length"; wrapping it took batchrl's internals.
    tiny = dict(num_envs=2, steps=120, policy_layers=(8,), value_layers=(8,), eval_episodes=2)
    name = f"{__name__}:ShortAcrobot"
    run = batchrl.train("acrobot_gymnax", env=name, logdir=tmp_path, **tiny)
    assert run.config.max_length == 30 and run.metrics[-1]["eval/length"] == 30
    given = batchrl.train("acrobot_gymnax", env=ShortAcrobot(), logdir=None, **tiny)
    assert given.config.max_length == 30 and given.metrics[-1]["eval/length"] == 30
