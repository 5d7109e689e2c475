"""Env-steps/s of Atari games stepped in batches: BatchEnv.atari beside EnvPool and Gymnasium.

Prints one JSON line. For each game and batch size, every peer steps the same number of
games, preprocessed as the `breakout` preset's (4 frames skipped and max-pooled, 84 x 84
grayscale, 4 stacked, up to 30 no-ops at a game's start, rewards clipped, a lost life
ends the episode, no sticky actions), with random actions drawn beforehand, in rounds
that alternate the peers and start each round with the next one (the machines are
shared and noisy). Each round's rates and the ratios within it are reported, with their
medians. The peers:

- `batch_env_atari`: `BatchEnv.atari`, ale-py's AtariVectorEnv in its C++ threads, one
  per core and pinned to it (its default), with the preset's options.
- `batch_env_atari_unpinned`: the same with `thread_affinity_offset=-1`, as it stepped
  before its threads were pinned.
- `envpool_async`: EnvPool's async loop, `recv` then `send` of the whole batch
  (`batch_size=num_envs`), one thread per core, unpinned (its default); the window ends
  on the last `recv`.
- `envpool_async_pinned`: the same, its threads pinned as `BatchEnv.atari`'s.
- `envpool_sync`: the same pool's `step`.
- `async_vector_env`: Gymnasium's AsyncVectorEnv, one process per game (its design),
  over `gym.make("ALE/<Game>-v5", frameskip=1)`, AtariPreprocessing, ClipReward and
  FrameStackObservation(4); no FIRE at a game's start, and only a game over ends its
  episode (its `terminal_on_life_loss` would start a new game at every lost life).

Without EnvPool (`pip install -e '.[bench]'`), or with one that cannot make the games,
its peers are left out and `envpool_missing` says why.

About 3.5 minutes on 2 cores:

    python benchmarks/atari_throughput.py [--rounds 7] [--seconds 1.0] [--games Pong Breakout]
        [--sizes 8 32]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time
from collections.abc import Callable

import ale_py
import flags
import gymnasium as gym
import numpy as np

from batchrl.configs import pixel_presets
from batchrl.envs import BatchEnv
from batchrl.envs.host import split
from batchrl.scripts import provenance

gym.register_envs(ale_py)

GAMES = ("Pong", "Breakout")
OURS = "batch_env_atari"
MIN_CALLS = 4  # Per timed window, however slow the peer.
# EnvPool's options nearest the `breakout` preset's. Still different: the step after a lost
# life is a reset within the game (1 to 30 no-ops, then FIRE), and a new game's frame stack
# holds its first frame four times where ale-py's holds zeros.
ENVPOOL_OPTIONS = dict(
    episodic_life=True,  # A lost life ends the episode; the game goes on at the reset.
    reward_clip=True,
    noop_max=30,
    use_fire_reset=True,
    repeat_action_probability=0.0,
    stack_num=4,
    frame_skip=4,
    img_height=84,
    img_width=84,
    gray_scale=True,
    max_episode_steps=27_000,  # ale-py's 108,000 frames.
)


class EnvPoolAsync:
    """EnvPool's async loop over the whole batch: each call receives the results, then sends.

    `first_core`: where its threads are pinned, one per core from it; -1: unpinned.
    """

    def __init__(self, envpool, task: str, num_envs: int, cores: int, first_core: int = -1):
        self.env = envpool.make(
            task,
            env_type="gymnasium",
            num_envs=num_envs,
            batch_size=num_envs,
            num_threads=cores,
            seed=0,
            thread_affinity_offset=first_core,
            **ENVPOOL_OPTIONS,
        )
        self.env.async_reset()
        self.in_flight = True

    def step(self, action: np.ndarray) -> None:
        env_id = None
        if self.in_flight:
            *_, info = self.env.recv()
            env_id = info["env_id"]
        self.env.send(action, env_id)
        self.in_flight = True

    def finish(self) -> None:
        """Receives the step in flight, so that no game runs into another peer's window."""
        self.env.recv()
        self.in_flight = False


def make_gymnasium(env_id: str) -> gym.Env:
    """One game through Gymnasium's wrappers, preprocessed as the `breakout` preset's."""
    env = gym.make(env_id, frameskip=1, repeat_action_probability=0.0)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84)
    env = gym.wrappers.ClipReward(env, -1.0, 1.0)
    return gym.wrappers.FrameStackObservation(env, stack_size=4)


def load_envpool(games) -> tuple[object | None, str | None]:
    """EnvPool's module, or None and why its peers are left out."""
    try:
        import envpool  # From the bench extra.
    except Exception as error:  # An import that fails for any reason leaves the peer out.
        return None, f"import envpool failed: {type(error).__name__}: {error}"
    known = set(envpool.list_all_envs())
    missing = [f"{game}-v5" for game in games if f"{game}-v5" not in known]
    if missing:
        return None, f"envpool {envpool.__version__} has no {', '.join(missing)}"
    return envpool, None


def timed(
    step: Callable[[np.ndarray], None],
    actions: np.ndarray,
    seconds: float,
    finish: Callable[[], None] | None,
) -> float:
    """Env-steps/s of `step` on each batch of `actions` for `seconds`, MIN_CALLS at least."""
    calls, start = 0, time.perf_counter()
    while calls < MIN_CALLS or time.perf_counter() - start < seconds:
        step(actions[calls % len(actions)])
        calls += 1
    steps = calls * actions.shape[1]
    if finish is not None:
        finish()
    return steps / (time.perf_counter() - start)


def peers(game: str, num_envs: int, cores: int, envpool) -> tuple[dict, list]:
    """Each peer's (step, finish), and what to close after."""
    # Gymnasium's processes first: forked before this batch's game threads start.
    theirs = gym.vector.AsyncVectorEnv(
        [functools.partial(make_gymnasium, f"ALE/{game}-v5")] * num_envs
    )
    theirs.reset(seed=0)
    ours = BatchEnv.atari(
        f"ALE/{game}-v5", num_envs, threads=cores, **pixel_presets.breakout().env_kwargs
    )
    ours.reset(seed=0)
    unpinned = BatchEnv.atari(
        f"ALE/{game}-v5",
        num_envs,
        threads=cores,
        thread_affinity_offset=-1,
        **pixel_presets.breakout().env_kwargs,
    )
    unpinned.reset(seed=0)
    steppers = {
        OURS: (ours.step, None),
        f"{OURS}_unpinned": (unpinned.step, None),
        "async_vector_env": (theirs.step, None),
    }
    closers = [ours, unpinned, theirs]
    if envpool is not None:
        pooled = EnvPoolAsync(envpool, f"{game}-v5", num_envs, cores)
        sync = envpool.make(
            f"{game}-v5",
            env_type="gymnasium",
            num_envs=num_envs,
            batch_size=num_envs,
            num_threads=cores,
            seed=0,
            **ENVPOOL_OPTIONS,
        )
        sync.reset()
        pinned = EnvPoolAsync(
            envpool, f"{game}-v5", num_envs, cores, split.first_core_to_pin(cores)
        )
        steppers["envpool_async"] = (pooled.step, pooled.finish)
        steppers["envpool_async_pinned"] = (pinned.step, pinned.finish)
        steppers["envpool_sync"] = (sync.step, None)
        closers += [pooled.env, pinned.env, sync]
    return steppers, closers


def measure(game: str, num_envs: int, cores: int, seconds: float, rounds: int, envpool) -> dict:
    steppers, closers = peers(game, num_envs, cores, envpool)
    num_actions = gym.make(f"ALE/{game}-v5").action_space.n
    actions = np.random.default_rng(0).integers(0, num_actions, (64, num_envs), dtype=np.int32)
    samples: dict[str, list[float]] = {name: [] for name in steppers}
    names = list(steppers)
    try:
        for step, finish in steppers.values():  # Warms the games up.
            timed(step, actions[:8], 0.0, finish)
        for round_ in range(rounds):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                step, finish = steppers[name]
                samples[name].append(round(timed(step, actions, seconds, finish)))
    finally:
        for env in closers:
            env.close()
    ratios = {
        f"{OURS}_over_{peer}": [
            round(a / b, 3) for a, b in zip(samples[OURS], samples[peer], strict=True)
        ]
        for peer in samples
        if peer != OURS
    }
    return {
        "game": game,
        "num_envs": num_envs,
        "steps_per_sec": samples,
        "median_steps_per_sec": {name: statistics.median(v) for name, v in samples.items()},
        "ratios_per_round": ratios,
        "median_ratios": {name: round(statistics.median(v), 3) for name, v in ratios.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=flags.positive_float, default=1.0, help="per measurement")
    parser.add_argument("--rounds", type=flags.positive_int, default=7, help="alternating repeats")
    parser.add_argument("--games", nargs="+", default=GAMES)
    parser.add_argument("--sizes", nargs="+", type=flags.positive_int, default=[8, 32])
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    envpool, envpool_missing = load_envpool(args.games)
    results = [
        measure(game, n, cores, args.seconds, args.rounds, envpool)
        for game in args.games
        for n in args.sizes
    ]
    record = {
        "benchmark": "atari_throughput",
        "threads": {OURS: cores, "envpool": cores, "async_vector_env": "one process per env"},
        "pinned_from_core": split.first_core_to_pin(cores),  # -1: none (not all cores).
        "commit": provenance.source_commit(),
        "machine": provenance.machine(),
        "ale_py": ale_py.__version__,
        "envpool": None if envpool is None else envpool.__version__,
        **({"envpool_missing": envpool_missing} if envpool_missing else {}),
        "results": results,
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
