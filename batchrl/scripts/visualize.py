"""Renders a trained policy: MP4 videos and a JSON of episode returns and lengths.

    python -m batchrl.scripts.visualize --logdir runs/<timestamp>-<config> --outdir videos

Loads the run's last good checkpoint (`--best`: its best-evaluated policy, `best.bin`)
as `batchrl.load` does, and runs the policy as the run's evaluations do (`Policy.act`:
its mean action, or sampled actions where the config sets `eval_sample`, each episode's
row in episodes.json then carrying "sampled": true; `--sample` and `--mean-action` choose,
as `evaluate`'s do) in the run's Gymnasium env (a
JAX-native run uses the Gymnasium env it matches), rendering headless: MuJoCo through
EGL, or OSMesa where EGL is missing; classic-control envs through SDL's dummy video
driver, and its dummy audio driver (no sound card asked for). An Atari run (backend
'ale', whose vector env renders nothing) plays in one Gymnasium env that plays as its
evaluation does (`atari.single`): whole games scored by the game's own rewards, filmed
in the game's RGB frames. A frame is filmed a policy step,
so a run that repeats actions plays at its env's fps over `action_repeat`; a JAX-native
env with no Gymnasium env (MinAtar's, or one of your own named `module:qualname`) is
refused in one line (`evaluate` scores it). Episode i starts as `reset(seed=S + i)` puts
it, S the run's seed or `--seed S`, which also seeds the sampled actions. Into a folder
of an earlier recording, the videos its episodes.json named that this one does not write
again are removed.
"""

from __future__ import annotations

import argparse
import ctypes.util
import dataclasses
import json
import os
import pathlib
import re
import sys
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from batchrl.scripts import action_choice, command_line, exiting, run_argument, video_file
from batchrl.training import file_writes, run_folder


class UsageError(Exception):
    """Bad input: reported as one line, exit status 2."""


_HEADLESS = {"egl": "EGL", "osmesa": "OSMesa"}  # MUJOCO_GL's headless values, their libraries.


def choose_headless_gl() -> str:
    """Picks EGL or OSMesa for MuJoCo before it loads; a one-line error when neither exists.

    A `MUJOCO_GL` set to what cannot render here (a headless library not installed,
    `glfw` with no display) gives way, with a warning, to one that can: MuJoCo failed as
    it loaded, or at the first frame, with GL's own words.
    """
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    # Pygame opens the sound card too: on a machine without one, ALSA fills stderr.
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    chosen = os.environ.get("MUJOCO_GL", "").strip().lower()
    lacking = _gl_lacking(chosen)
    if chosen and lacking is None:
        return os.environ["MUJOCO_GL"]
    for backend, library in _HEADLESS.items():
        if ctypes.util.find_library(library):
            if chosen:
                said = f"MUJOCO_GL={chosen} {lacking}: rendering with {backend}"
                print(f"visualize: warning: {said}", file=sys.stderr)
                os.environ["PYOPENGL_PLATFORM"] = backend
            os.environ["MUJOCO_GL"] = backend
            os.environ.setdefault("PYOPENGL_PLATFORM", backend)
            return backend
    if chosen:
        return os.environ["MUJOCO_GL"]  # Nothing better: MuJoCo says what fails.
    raise UsageError(
        "no headless OpenGL found: install EGL (apt-get install libegl1) or OSMesa "
        "(apt-get install libosmesa6), or set MUJOCO_GL"
    )


def _gl_lacking(chosen: str) -> str | None:
    """What `MUJOCO_GL=chosen` lacks on this machine to render; None if nothing known."""
    if chosen in _HEADLESS and not ctypes.util.find_library(_HEADLESS[chosen]):
        return f"needs the {_HEADLESS[chosen]} library, which is not installed"
    if chosen in ("glfw", "glx") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        return "needs a display, and DISPLAY is not set"
    return None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = command_line.ArgumentParser(
        prog="python -m batchrl.scripts.visualize", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--outdir", required=True, help="where videos and episodes.json go")
    parser.add_argument("--episodes", type=int, default=1, help="episodes to record (default: 1)")
    parser.add_argument(
        "--best", action="store_true", help="the run's best-evaluated policy, not its last"
    )
    parser.add_argument(
        "--seed",
        type=int,
        help="episode i starts at reset(seed=SEED + i) (default: the run's own seed)",
    )
    action_choice.add(parser)
    folder = "the run folder, DIR/<timestamp>-<config>"
    return run_argument.parse(parser, argv, folder, many=False)


def follow_the_agent(env) -> bool:
    """Films a MuJoCo env through its model's tracking camera ("track") when it has one.

    Gymnasium renders locomotion tasks from a still camera that the agent leaves within
    seconds (HalfCheetah after about 30 of 1,000 frames); every MuJoCo locomotion model
    has a camera named "track" that follows the agent's centre of mass. Returns whether
    one was found; other envs keep their camera.
    """
    renderer = getattr(env.unwrapped, "mujoco_renderer", None)
    if renderer is None:
        return False
    import mujoco

    camera = mujoco.mj_name2id(renderer.model, mujoco.mjtObj.mjOBJ_CAMERA, "track")
    if camera < 0:
        return False
    renderer.camera_id = camera
    return True


def check_filmable(config) -> None:
    """A one-line UsageError for a JAX-native run with no Gymnasium env to film it in.

    Only a JAX-native env named as a Gymnasium id has one; an env of the user's own,
    named `module:qualname`, is XLA code that renders nothing.
    """
    if config.jax_native and (":" in config.env or config.env not in gym.registry):
        raise UsageError(
            f"a run of {config.backend} env {config.env!r}, which has no Gymnasium env to film "
            "it in (MinAtar's, say): evaluate scores its policy on its own env"
        )


def film_env(config):
    """The one Gymnasium env, rendering RGB frames, that `config`'s policy is filmed in.

    An Atari run's is the env that plays its games as its evaluation does (whole games,
    the game's own rewards); any other run's is its own Gymnasium env, a MuJoCo one's
    camera following the agent.
    """
    if config.backend == "ale":
        from batchrl.envs.atari import single  # ale-py is an optional dependency.
        from batchrl.training import environments

        options = environments.atari_options(config, evaluation=True)
        return single.make(config.env, options, render_mode="rgb_array")
    check_filmable(config)
    from batchrl.envs.host import make

    kwargs = config.env_kwargs
    if config.backend == "gymnax":  # Its step limit is `max_length`'s; others are refused.
        kwargs = {k: v for k, v in kwargs.items() if k != "max_steps_in_episode"}

    def built(render_mode: str | None) -> gym.Env:
        return make.Make(
            config.env,
            config.max_length,
            render_mode=render_mode,
            action_repeat=config.action_repeat,
            kwargs=kwargs,
        )()

    try:
        env = built("rgb_array")
    except TypeError as error:  # A constructor of one's own without the keyword.
        if "keyword argument 'render_mode'" not in str(error):
            if not kwargs:
                raise
            said = exiting.first_line(error)
            raise UsageError(
                f"Gymnasium's env {config.env!r}, which visualize films the run in, refused "
                f"its env_kwargs={kwargs!r}: {said}"
            ) from None
        env = built(None)  # One that renders RGB frames as it is made is filmed so.
        if env.render_mode != "rgb_array":
            env.close()
            renders = "nothing" if env.render_mode is None else f"in {env.render_mode!r}"
            raise UsageError(
                f"env {config.env!r} takes no render_mode and renders {renders}: visualize "
                "films an env that renders with render_mode='rgb_array'"
            ) from None
    modes = env.metadata.get("render_modes")
    if isinstance(modes, list | tuple) and "rgb_array" not in modes:  # Gymnasium asserted.
        env.close()
        raise UsageError(
            f"env {config.env!r} renders in {list(modes)}, not 'rgb_array': visualize films an "
            "env that renders with render_mode='rgb_array'"
        )
    follow_the_agent(env)
    return env


def first_frame(env: gym.Env, config) -> Any:
    """`env.render()` after a reset: an RGB frame, or a one-line UsageError before any episode.

    An env that renders nothing played a whole episode, then failed in the MP4 writer.
    """
    frame = env.render()
    if getattr(frame, "ndim", 0) != 3:
        env.close()
        shown = f"an array of shape {frame.shape}" if hasattr(frame, "shape") else repr(frame)
        raise UsageError(
            f"env {config.env!r} renders no RGB frame (render() gave {shown}): visualize "
            "films an env that renders with render_mode='rgb_array'"
        )
    return frame


def record(
    config, policy, episodes: int, outdir: pathlib.Path, stats: list[dict] | None = None
) -> list[dict]:
    """Runs `episodes` episodes as the run evaluates; writes one MP4 each; returns stats.

    The policy takes its mean action, or samples where `config.eval_sample` says so.
    Episode i starts at `reset(seed=config.seed + i)`. Each episode's row goes into
    `stats` as it ends; a Ctrl-C writes `episodes.json` of those played through, then is
    raised, so the folder's index names the videos it holds.
    """
    stats = [] if stats is None else stats
    made = not outdir.exists()
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"--outdir {str(outdir)!r} is a file, not a folder") from None
    except OSError as error:
        raise file_writes.write_error(outdir, error, started=False) from None
    try:
        _played(config, policy, episodes, outdir, stats)
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt) and stats:  # Those played through, indexed.
            _index(outdir, stats)
        elif made and not any(outdir.iterdir()):  # No empty folder left behind.
            outdir.rmdir()
        raise
    _index(outdir, stats)
    return stats


def _index(outdir: pathlib.Path, stats: list[dict]) -> None:
    """Writes `episodes.json` of `stats`; an earlier recording's videos it does not name go."""
    stale = _videos_named(outdir)  # An earlier recording's, removed once this one is written.
    file_writes.write_atomic(outdir / "episodes.json", json.dumps(stats, indent=2) + "\n")
    for name in stale - {row["video"] for row in stats}:
        (outdir / name).unlink(missing_ok=True)


def _played(config, policy, episodes: int, outdir: pathlib.Path, stats: list[dict]) -> None:
    """`record`'s episodes, each written to its MP4 in `outdir` as it plays, its row to `stats`."""
    env = film_env(config)
    try:
        # The first episode's start, checked before any episode is played.
        obs, _ = env.reset(seed=config.seed)
        frame = first_frame(env, config)
        fps = env.metadata.get("render_fps", 30)
        if config.backend != "ale":  # One frame a policy step: `action_repeat` env steps.
            fps /= config.action_repeat
        deterministic = not config.eval_sample
        for episode in range(episodes):
            if episode:
                obs, _ = env.reset(seed=config.seed + episode)
                frame = env.render()
            policy.reset()
            score, length, done = 0.0, 0, False
            path = outdir / f"episode-{episode}.mp4"
            with video_file.writing(path, fps) as film:
                film(frame)
                while not done:
                    action = policy.act(obs, deterministic)
                    obs, reward, terminated, truncated, _ = env.step(action)
                    film(env.render())
                    score, length = score + float(reward), length + 1
                    done = terminated or truncated
            row = {"episode": episode, "return": score, "length": length, "video": path.name}
            stats.append(row if deterministic else {**row, "sampled": True})
    finally:
        env.close()


def _videos_named(outdir: pathlib.Path) -> set[str]:
    """The videos an earlier recording's episodes.json in `outdir` names, if any.

    A recording of fewer episodes into its folder left the earlier one's later videos
    beside an episodes.json that no longer named them. Only names visualize writes count.
    """
    try:
        rows = json.loads((outdir / "episodes.json").read_text())
    except (OSError, ValueError):
        return set()
    names = (
        [row.get("video") for row in rows if isinstance(row, dict)]
        if isinstance(rows, list)
        else []
    )
    return {
        name for name in names if isinstance(name, str) and re.fullmatch(r"episode-\d+\.mp4", name)
    }


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    args = parse_args(argv)
    stats: list[dict] = []  # Each episode's row as it ends.
    try:
        if args.episodes < 1:
            raise UsageError(f"--episodes must be at least 1, got {args.episodes}")
        if args.seed is not None and not 0 <= args.seed < 2**31:
            raise UsageError(f"--seed must be a whole number in [0, 2**31), got {args.seed}")
        choose_headless_gl()
        if __name__ == "__main__":  # The command's own process: each MuJoCo warning once.
            from batchrl.envs.host import mujoco_warnings

            mujoco_warnings.route()
        rundir = pathlib.Path(args.logdir)
        config = run_folder.read_config(rundir)
        check_filmable(config)
        from batchrl.training import policy  # Imports JAX: after the GL backend is chosen.

        if args.seed is not None:
            config = dataclasses.replace(config, seed=args.seed)
        if action_choice.chosen(args) is not None:  # As the run evaluates, or as chosen.
            config = dataclasses.replace(config, eval_sample=action_choice.chosen(args))
        loaded = policy.load(rundir, best=args.best, seed=args.seed)
        record(config, loaded, args.episodes, pathlib.Path(args.outdir), stats)
    except KeyboardInterrupt:  # The episodes played through stand, indexed; envs closed.
        _say(stats)
        print("visualize: interrupted", file=sys.stderr)
        return exiting.INTERRUPTED
    except (UsageError, run_folder.RunFolderError) as error:
        print(f"visualize: error: {error}", file=sys.stderr)
        return 2
    except file_writes.WriteError as error:
        print(f"visualize: error: {error}", file=sys.stderr)
        return 1
    except Exception as error:
        from batchrl.training import checkpoint  # Imported with the policy: after the GL.

        name, said = type(error).__name__, exiting.first_line(error)
        if isinstance(error, checkpoint.CheckpointError):  # Its text names file and fault.
            name = said
        print(f"visualize: error: {name}{': ' + said if said != name else ''}", file=sys.stderr)
        return 1
    _say(stats)
    return 0


def _say(stats: list[dict]) -> None:
    for row in stats:
        print(f"episode {row['episode']}: return {row['return']:.1f}, length {row['length']}")


if __name__ == "__main__":
    exiting.leave(main())
