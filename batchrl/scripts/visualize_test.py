import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import gymnasium as gym
import imageio.v3 as iio
import pytest

from batchrl import configs
from batchrl.scripts import train, visualize
from batchrl.training import run_folder

# One test process runs this module (`--dist loadgroup`), so its trained run is made once.
pytestmark = pytest.mark.xdist_group("visualize_test")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> pathlib.Path:
    logdir = tmp_path_factory.mktemp("runs")
    settings = [
        "num_envs=2",
        "update_every=2",
        "max_length=40",
        "eval_episodes=2",
        "steps=160",
        "policy_layers=16,16",
        "value_layers=16,16",
    ]
    return _train(logdir, "pendulum_jax", settings)


def _train(logdir: pathlib.Path, config: str, settings: list[str]) -> pathlib.Path:
    """The run folder the train command makes of `config` with `settings`."""
    args = ["--logdir", str(logdir), "--config", config]
    for setting in settings:
        args += ["--set", setting]
    assert train.main(args) == 0
    (folder,) = logdir.iterdir()
    return folder


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:os.fork")  # Reading MP4 starts ffmpeg (fork, then exec).
def test_writes_videos_that_read_back_with_every_frame(run, tmp_path):
    out = tmp_path / "videos"
    assert visualize.main(["--logdir", str(run), "--outdir", str(out), "--episodes", "2"]) == 0
    stats = json.loads((out / "episodes.json").read_text())
    assert [row["length"] for row in stats] == [40, 40]  # The run's max_length.
    assert not any("sampled" in row for row in stats)  # Pendulum's mean action.
    for row in stats:
        frames = iio.imread(out / row["video"])
        assert frames.shape[0] == row["length"] + 1  # The reset frame, then one per step.
        assert frames.shape[-1] == 3 and frames.std() > 0
    # Episode i starts at the seed plus i: seed 1's first episode is the run's second.
    seeded = tmp_path / "seeded"
    args = ["--logdir", str(run), "--outdir", str(seeded), "--seed", "1"]
    assert visualize.main(args) == 0
    (first,) = json.loads((seeded / "episodes.json").read_text())
    assert first["return"] == stats[1]["return"] != stats[0]["return"]
    # Fewer episodes into the same folder: the earlier recording's later video went on
    # lying beside an episodes.json that no longer named it. A file of the user's stays.
    (out / "mine.mp4").write_bytes(b"")
    assert visualize.main(["--logdir", str(run), "--outdir", str(out), "--episodes", "1"]) == 0
    assert sorted(path.name for path in out.iterdir()) == [
        "episode-0.mp4",
        "episodes.json",
        "mine.mp4",
    ]


@pytest.mark.slow
def test_renders_the_best_evaluated_policy(run, tmp_path):
    out = tmp_path / "videos"
    args = ["--logdir", str(run), "--outdir", str(out), "--best"]
    assert visualize.main(args) == 0
    (row,) = json.loads((out / "episodes.json").read_text())
    assert row["length"] == 40 and (out / row["video"]).stat().st_size > 0


@pytest.mark.slow
def test_a_classic_control_run_films_with_nothing_on_stderr(run, tmp_path):
    # Pygame opened the sound card: on a machine with none, ALSA wrote eight lines.
    env = {name: value for name, value in os.environ.items() if not name.startswith("SDL_")}
    command = [sys.executable, "-m", "batchrl.scripts.visualize", "--logdir", str(run)]
    command += ["--outdir", str(tmp_path / "videos")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "episode 0: return {:.1f}, length 40\n".format(
        json.loads((tmp_path / "videos" / "episodes.json").read_text())[0]["return"]
    )
    assert done.stderr == ""


@pytest.mark.slow
def test_ctrl_c_ends_it_in_one_line_the_videos_played_through_kept(run, tmp_path):
    # A traceback of 28 lines, ending in the MP4 writer, and death by the signal.
    videos = tmp_path / "videos"
    command = [sys.executable, "-m", "batchrl.scripts.visualize", "--logdir", str(run)]
    command += ["--outdir", str(videos), "--episodes", "100000"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        while not (videos / "episode-0.mp4").exists() and p.poll() is None:
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    assert p.returncode == 130 and err == "visualize: interrupted\n", err
    # The episodes played through: said, indexed, filmed (their returns were lost).
    rows = json.loads((videos / "episodes.json").read_text())
    assert out.splitlines() == [
        f"episode {i}: return {row['return']:.1f}, length 40" for i, row in enumerate(rows)
    ]
    assert rows and all((videos / row["video"]).stat().st_size > 0 for row in rows)


@pytest.mark.slow
def test_sample_and_mean_action_choose_the_actions_as_evaluates_do(run, tmp_path, capsys):
    base = ["--logdir", str(run), "--episodes", "2"]
    assert visualize.main([*base, "--outdir", str(tmp_path / "mean")]) == 0
    assert visualize.main([*base, "--outdir", str(tmp_path / "sampled"), "--sample"]) == 0
    mean = json.loads((tmp_path / "mean" / "episodes.json").read_text())
    sampled = json.loads((tmp_path / "sampled" / "episodes.json").read_text())
    assert all(row["sampled"] is True for row in sampled) and not any("sampled" in r for r in mean)
    assert [row["return"] for row in sampled] != [row["return"] for row in mean]
    with pytest.raises(SystemExit) as exit_:
        visualize.main([*base, "--outdir", str(tmp_path / "both"), "--sample", "--mean-action"])
    assert exit_.value.code == 2
    assert "--mean-action: not allowed with argument --sample" in capsys.readouterr().err


@pytest.fixture(scope="module")
def atari_run(tmp_path_factory) -> pathlib.Path:
    """Pong through ale-py after one update; no no-op starts, so a game has one course."""
    logdir = tmp_path_factory.mktemp("atari_runs")
    settings = [
        "num_envs=1",
        "env_threads=1",
        "steps_per_update=8",
        "num_minibatches=1",
        "update_epochs=1",
        "steps=8",
        "phase_steps=8",
        "max_length=120",  # Long enough for the opponent to score.
        "eval_episodes=1",
        "final_episodes=1",
        "env_kwargs={noop_max: 0, life_loss_info: true}",
    ]
    return _train(logdir, "pong", settings)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:os.fork")
def test_films_an_atari_run_in_the_games_frames_scored_as_its_evaluation(atari_run, tmp_path):
    from batchrl.envs import BatchEnv
    from batchrl.training import environments, policy

    out = tmp_path / "videos"
    assert visualize.main(["--logdir", str(atari_run), "--outdir", str(out)]) == 0
    (row,) = json.loads((out / "episodes.json").read_text())
    frames = iio.imread(out / row["video"])
    assert frames.shape == (row["length"] + 1, 210, 160, 3)  # The game's RGB screen.
    assert frames.std() > 0
    # The same policy in the games evaluation steps (ale-py's vector env, whole games, the
    # game's own rewards), sampling its actions as Atari's evaluation does from the same
    # key, plays the same game to the same score.
    config = run_folder.read_config(atari_run)
    assert config.eval_sample and row["sampled"] is True
    loaded = policy.load(atari_run)
    options = environments.atari_options(config, evaluation=True)
    rewards, done = [], False
    with BatchEnv.atari(config.env, 1, autoreset_mode="disabled", **options) as game:
        obs, _ = game.reset(seed=config.seed)
        while not done:
            obs, reward, terminated, truncated, _ = game.step(loaded.act(obs, deterministic=False))
            rewards.append(float(reward[0]))
            done = terminated[0] or truncated[0]
    assert row["length"] == len(rewards) == config.max_length
    assert row["return"] == sum(rewards) < 0  # The opponent's points count.


def test_missing_run_or_checkpoint_is_one_line(tmp_path, capsys):
    assert visualize.main(["--logdir", str(tmp_path / "nope"), "--outdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and len(err.strip().splitlines()) == 1
    empty = tmp_path / "20260101T000000-pendulum_jax"
    empty.mkdir()
    (empty / "config.yaml").write_text("backend: jax\nalgorithm:\n  max_length: 40\n")
    assert visualize.main(["--logdir", str(empty), "--outdir", str(tmp_path)]) == 2
    assert "has no checkpoint yet" in capsys.readouterr().err
    assert visualize.main(["--logdir", str(empty), "--outdir", str(tmp_path), "--best"]) == 2
    assert "has no best policy: no phase evaluated" in capsys.readouterr().err
    args = ["--logdir", str(empty), "--outdir", str(tmp_path), "--seed", "-2"]
    assert visualize.main(args) == 2
    err = capsys.readouterr().err
    assert err == "visualize: error: --seed must be a whole number in [0, 2**31), got -2\n"


def test_a_corrupt_best_policy_is_one_line_naming_the_file(run, tmp_path, capsys):
    # It read "CheckpointError: <path>: truncated ...", the class's name before its text.
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    best = copy / "checkpoints" / "best.bin"
    best.write_bytes(best.read_bytes()[:100])
    args = ["--logdir", str(copy), "--outdir", str(tmp_path / "out"), "--best"]
    assert visualize.main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"visualize: error: {best}: truncated") and err.count("\n") == 1


def test_one_run_folder_as_the_argument_or_logdir(run, tmp_path, capsys):
    out = tmp_path / "argument"
    assert visualize.main([str(run), "--outdir", str(out), "--episodes", "1"]) == 0
    assert json.loads((out / "episodes.json").read_text())
    with pytest.raises(SystemExit):
        visualize.main([str(run), "--logdir", str(tmp_path), "--outdir", str(out)])
    assert "one run folder at a time, got 2" in capsys.readouterr().err


def test_a_gymnax_run_without_a_gymnasium_env_is_one_line(tmp_path, capsys):
    folder = run_folder.create(tmp_path, configs.get("breakout_minatar"), "breakout_minatar")
    assert visualize.main(["--logdir", str(folder), "--outdir", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err
    assert err == (
        "visualize: error: a run of gymnax env 'Breakout-MinAtar', which has no Gymnasium env "
        "to film it in (MinAtar's, say): evaluate scores its policy on its own env\n"
    )


def test_a_run_of_a_jax_native_env_of_ones_own_is_one_line(tmp_path, capsys):
    """An env named module:qualname is XLA code: no Gymnasium env renders it."""
    config = configs.replace(configs.get("cartpole_jax"), env="batchrl.testing.grid_cue:GridCue")
    folder = run_folder.create(tmp_path, config, "cartpole_jax")
    assert visualize.main(["--logdir", str(folder), "--outdir", str(tmp_path / "v")]) == 2
    assert capsys.readouterr().err == (
        "visualize: error: a run of jax env 'batchrl.testing.grid_cue:GridCue', which has no "
        "Gymnasium env to film it in (MinAtar's, say): evaluate scores its policy on its own "
        "env\n"
    )


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:os.fork")
def test_a_run_that_repeats_actions_is_filmed_at_its_envs_speed(run, tmp_path):
    folder = tmp_path / run.name
    shutil.copytree(run, folder)  # As if trained in worker processes, each action twice.
    config = (folder / "config.yaml").read_text()
    config = config.replace("\nbackend: jax\n", "\nbackend: processes\n")
    (folder / "config.yaml").write_text(config.replace("action_repeat: 1\n", "action_repeat: 2\n"))
    assert run_folder.read_config(folder).action_repeat == 2
    out = tmp_path / "videos"
    assert visualize.main(["--logdir", str(folder), "--outdir", str(out)]) == 0
    (row,) = json.loads((out / "episodes.json").read_text())
    assert row["length"] == 20  # 40 env steps, two a policy step.
    assert iio.imread(out / row["video"]).shape[0] == 21
    assert iio.immeta(out / row["video"])["fps"] == 15.0  # Pendulum's 30 a second, halved.


def agent_pixels(frame) -> int:
    """Pixels of HalfCheetah's body: the model's brown ("self" material), not floor or sky."""
    r, g, b = (frame[..., i].astype(int) for i in range(3))
    return int(((r - b > 60) & (r > g) & (g > b)).sum())


@pytest.mark.parametrize("follow", [True, False])
def test_the_video_camera_follows_a_running_agent(follow):
    import mujoco

    from batchrl.envs.host import make

    visualize.choose_headless_gl()
    env = make.Make("HalfCheetah-v5", 1000, render_mode="rgb_array")()
    try:
        if follow:
            assert visualize.follow_the_agent(env)
        else:  # A still free camera, Gymnasium 1.4's default (1.3 picks the model's camera 0).
            env.unwrapped.mujoco_renderer.camera_id = -1
        env.reset(seed=0)
        start = agent_pixels(env.render())
        model, data = env.unwrapped.model, env.unwrapped.data
        data.qpos[0] = 30.0  # Where a good policy is about a third of the way in.
        mujoco.mj_forward(model, data)
        middle = agent_pixels(env.render())
    finally:
        env.close()
    assert start > 1000
    assert (middle > 1000) if follow else (middle == 0)  # The still camera loses it.


def test_envs_without_a_tracking_camera_keep_theirs():
    from batchrl.envs.host import make

    for name in ("Reacher-v5", "Pendulum-v1"):
        env = make.Make(name, 50, render_mode="rgb_array")()
        try:
            assert not visualize.follow_the_agent(env)
        finally:
            env.close()


@pytest.mark.slow
def test_an_outdir_it_cannot_write_is_one_line_naming_the_file(run, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    args = ["--logdir", str(run), "--outdir", str(tmp_path / "file")]
    assert visualize.main(args) == 2  # Was FileExistsError's own words.
    said = f"visualize: error: --outdir '{tmp_path / 'file'}' is a file, not a folder\n"
    assert capsys.readouterr().err == said
    inside = tmp_path / "file" / "videos"  # Was "make room or make 'file' writable".
    assert visualize.main(["--logdir", str(run), "--outdir", str(inside)]) == 1
    said = f"visualize: error: cannot write '{inside}': Not a directory; a file stands in its "
    said += "path\n"
    assert capsys.readouterr().err == said
    import imageio

    class Full:  # As a full disk stops ffmpeg part way through an episode.
        error = OSError(28, "No space left on device")

        def __init__(self, path, *args, **kwargs):
            self.path, self.frames = pathlib.Path(path), 0

        def append_data(self, frame):
            self.frames += 1
            self.path.write_bytes(b"part" * self.frames)
            if self.frames == 3:
                raise self.error

        def close(self):
            pass

    class Ended(Full):  # ffmpeg stopped by a full disk, as imageio says it: its command too.
        error = OSError("[Errno 32] Broken pipe\n\nFFMPEG COMMAND:\nffmpeg -y -f rawvideo")

    out = tmp_path / "videos"
    ended = "ffmpeg ended ([Errno 32] Broken pipe, its lines above); make room or make"
    ended += f" '{out}' writable"  # Its errno is not the OSError's: either may be why.
    for writer, why in ((Full, "No space left on device; make room on its disk"), (Ended, ended)):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(imageio, "get_writer", writer)
            assert visualize.main(["--logdir", str(run), "--outdir", str(out)]) == 1
        assert capsys.readouterr().err == (
            f"visualize: error: cannot write '{out / 'episode-0.mp4'}': {why}, then run the "
            "command again\n"
        )
        assert not out.exists()  # No part of a video, no episodes.json, no empty new folder.


def test_an_episode_that_fails_as_it_is_filmed_leaves_the_last_video_whole(run, tmp_path, capsys):
    # Its frames were held until it ended (1.2 GB for a 1,000-step MuJoCo episode), then
    # written; now they go to a file beside the video as it plays, renamed onto it once
    # whole.
    from batchrl.training import policy

    out = tmp_path / "videos"
    assert visualize.main(["--logdir", str(run), "--outdir", str(out)]) == 0
    before = (out / "episode-0.mp4").read_bytes()
    act, acted = policy.Policy.act, []

    def act_then_fail(self, obs, deterministic=True):
        acted.append(obs)
        if len(acted) == 20:
            raise RuntimeError("the policy failed")
        return act(self, obs, deterministic)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(policy.Policy, "act", act_then_fail)
        assert visualize.main(["--logdir", str(run), "--outdir", str(out), "--seed", "5"]) == 1
    assert capsys.readouterr().err == "visualize: error: RuntimeError: the policy failed\n"
    assert sorted(p.name for p in out.iterdir()) == ["episode-0.mp4", "episodes.json"]
    assert (out / "episode-0.mp4").read_bytes() == before


def test_a_jax_native_runs_env_kwargs_film_in_its_gymnasium_twin_or_say_why_not():
    # A gymnax run's parameters went to Gymnasium's Acrobot, which refused them, and the
    # line blamed render_mode, which Gymnasium's message listed among the keywords.
    pendulum = configs.replace(configs.get("pendulum_jax"), env_kwargs={"g": 2.0})
    assert visualize.film_env(pendulum).unwrapped.g == 2.0  # Gymnasium's Pendulum takes g.
    limited = {"max_steps_in_episode": 100}  # The run's max_length already: dropped.
    acrobot = configs.replace(configs.get("acrobot_gymnax"), env_kwargs=limited)
    assert visualize.film_env(acrobot).spec.id == "Acrobot-v1"
    acrobot = configs.replace(acrobot, env_kwargs={"dt": 0.1})
    with pytest.raises(visualize.UsageError) as error:
        visualize.film_env(acrobot)
    assert str(error.value).startswith(
        "Gymnasium's env 'Acrobot-v1', which visualize films the run in, refused its "
        "env_kwargs={'dt': 0.1}: "
    )


class TextOnly(gym.Env):
    """An env that declares it renders text alone."""

    metadata = {"render_modes": ["ansi"]}
    observation_space = gym.spaces.Box(-1.0, 1.0, (1,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode


def test_an_env_of_ones_own_that_cannot_film_is_refused_before_any_episode(tmp_path):
    # Built without the keyword, or rendering nothing: a raw TypeError, or a whole episode
    # played before the MP4 writer failed on frames of None.
    config = configs.replace(configs.get("pendulum"), env="batchrl.testing.mock:CountingEnv")
    with pytest.raises(visualize.UsageError) as error:
        visualize.film_env(config)
    assert str(error.value) == (
        "env 'batchrl.testing.mock:CountingEnv' takes no render_mode and renders nothing: "
        "visualize films an env that renders with render_mode='rgb_array'"
    )
    # One whose modes leave out RGB frames: Gymnasium's AssertionError at the first frame.
    text = configs.replace(config, env=f"{__name__}:TextOnly")
    with pytest.raises(visualize.UsageError) as error:
        visualize.film_env(text)
    assert str(error.value) == (
        f"env '{__name__}:TextOnly' renders in ['ansi'], not 'rgb_array': visualize films an "
        "env that renders with render_mode='rgb_array'"
    )
    # One that takes no render_mode but renders RGB frames as made was refused as well.
    filmed = configs.replace(config, env="batchrl.testing.mock:filmed_pendulum")
    env = visualize.film_env(filmed)
    env.reset(seed=0)
    assert visualize.first_frame(env, filmed).ndim == 3
    env.close()
    env = gym.make("Pendulum-v1")  # No render mode: render() gives None.
    env.reset(seed=0)
    refused = pytest.raises(visualize.UsageError)
    with pytest.warns(UserWarning, match="render_mode"), refused as error:  # Gymnasium warns.
        visualize.first_frame(env, configs.get("pendulum"))
    assert str(error.value) == (
        "env 'Pendulum-v1' renders no RGB frame (render() gave None): visualize films an env "
        "that renders with render_mode='rgb_array'"
    )


def test_an_error_without_a_message_is_one_line_and_leaves_no_empty_outdir(run, tmp_path, capsys):
    # An env that takes render_mode but renders nothing raises a bare NotImplementedError:
    # the command's own line ended in an IndexError, and left the new --outdir behind.
    rundir = tmp_path / run.name
    shutil.copytree(run, rundir)
    config = run_folder.read_config(rundir)
    env = "batchrl.testing.mock:NoRenderEnv"
    run_folder.write_config(rundir, configs.replace(config, env=env, backend="processes"))
    outdir = tmp_path / "videos"
    assert visualize.main(["--logdir", str(rundir), "--outdir", str(outdir)]) == 1
    assert capsys.readouterr().err == "visualize: error: NotImplementedError\n"
    assert not outdir.exists()


FILM_ONE_FRAME = """
import gymnasium as gym
from batchrl.scripts import visualize

visualize.choose_headless_gl()
env = gym.make("HalfCheetah-v5", render_mode="rgb_array")
env.reset(seed=0)
frame = env.render()
print(frame.shape, int(frame.std() > 0))
"""


def test_a_mujoco_gl_that_cannot_render_here_gives_way_with_a_warning(tmp_path):
    # `glfw` on a machine with no display (set in a shell's profile for a desktop): taken
    # as set, the first frame failed with GLFW's own error.
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("PYOPENGL_PLATFORM", None)
    result = subprocess.run(
        [sys.executable, "-c", FILM_ONE_FRAME],
        env={**env, "MUJOCO_GL": "glfw"},
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["(480,", "480,", "3)", "1"]
    warned = "MUJOCO_GL=glfw needs a display, and DISPLAY is not set: rendering with "
    assert f"visualize: warning: {warned}" in result.stderr
