"""PPO training speed on Atari Breakout: batchrl's `breakout` preset beside the RL Zoo's SB3 PPO.

Prints one JSON line. In the same run, env steps/s of training (collection and updates
together, no evaluation) of:

- `batchrl`: the `breakout` preset (CleanRL's ppo_atari settings, 8 envs x 128 steps an
  update, ale-py's vector env stepped from the compiled program, the Nature CNN), built
  as the train command builds it (`environments.build`, `build_eval`, `loop.build`, XLA
  on one thread as `api.limit_xla_threads` sets it) and trained with `loop.run_phase`,
  in phases of one update each. The first phase compiles and trains one update; it is
  reported apart and left out of the rate.
- `sb3_dummy_vec_env`, `sb3_subproc_vec_env`: Stable-Baselines3's PPO (torch, CPU) with
  the RL Zoo's `atari` entry of hyperparams/ppo.yml, read from the installed rl_zoo3
  (only the file is read, so `pip install --no-deps rl_zoo3` will do) or, without it,
  from its copy in `ZOO_ATARI`. Its envs are made as the Zoo's
  `ExperimentManager.create_envs` makes them: `make_atari_env` (the AtariWrapper that
  the entry's env_wrapper names) over the Zoo's `--vec-env` class (DummyVecEnv, its
  default, or SubprocVecEnv, a process per env), then `VecFrameStack(4)`, then PPO's
  own `VecTransposeImage`. The Zoo trains the `*NoFrameskip-v4` ids; here
  `ALE/Breakout-v5` is made with `frameskip=1` and `repeat_action_probability=0.0`,
  their equivalent and the `breakout` preset's (v5's defaults, 4 frames a step and
  sticky actions, would play 16 frames a step under AtariWrapper's 4). Each peer's
  first `learn()` call (one update) warms it up and is left out; the timed updates are
  further `learn(..., reset_num_timesteps=False)` calls, a callback marking each
  rollout's start and end to split collection from learning (`collect_share`).

After the warm-ups, `--rounds` rounds each train every peer for `--updates` updates
(1,024 env steps each), the peers in turn, each round starting with the next peer, so a
busy moment of the shared machine falls on all of them. A peer's rate is its timed env
steps over their seconds; `batchrl_over_best_sb3` divides batchrl's by the faster SB3
variant's. The run lasts about as long as 10 updates of every peer (batchrl's takes
some 6.6 s on 2 cores); `--quick`, one round of one update, checks that it runs.

    pip install -e '.[bench]' rl_zoo3
    python benchmarks/atari_training.py [--rounds 3] [--updates 3] [--sb3 dummy subproc]
        [--quick]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import time
import warnings
from collections.abc import Callable

import gymnasium as gym

try:  # The peer and the games: one line, not a traceback, where they are missing.
    import ale_py
    import torch
    import yaml
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecFrameStack
except ModuleNotFoundError as missing:
    raise SystemExit(
        f"atari_training.py needs {missing.name}, which is not installed: "
        "pip install -e '.[bench,atari]'"
    ) from None

from batchrl.configs import presets
from batchrl.training import api

PRESET = "breakout"
SB3_ENV = "ALE/Breakout-v5"
# The Zoo's ids are *NoFrameskip-v4: frames skipped by AtariWrapper alone, no sticky actions.
SB3_ENV_KWARGS = {"frameskip": 1, "repeat_action_probability": 0.0}
ATARI_WRAPPER = "stable_baselines3.common.atari_wrappers.AtariWrapper"
# rl_zoo3 2.9.2, hyperparams/ppo.yml lines 6-19: the `atari` entry, which the Zoo's
# ExperimentManager (exp_manager.py, read_hyperparameters) uses for every env whose entry
# point is ale-py's AtariEnv. Used only when rl_zoo3 is not installed.
ZOO_ATARI = {
    "env_wrapper": [ATARI_WRAPPER],
    "frame_stack": 4,
    "policy": "CnnPolicy",
    "n_envs": 8,
    "n_steps": 128,
    "n_epochs": 4,
    "batch_size": 256,
    "n_timesteps": 1e7,
    "learning_rate": "lin_2.5e-4",
    "clip_range": "lin_0.1",
    "vf_coef": 0.5,
    "ent_coef": 0.01,
}
OURS = "batchrl"


def zoo_atari() -> tuple[dict, str]:
    """The Zoo's `atari` PPO entry and where it was read: the installed file, or ZOO_ATARI.

    The file is found without importing rl_zoo3, whose import needs its extra packages.
    """
    found = importlib.util.find_spec("rl_zoo3")
    if found is None or not found.submodule_search_locations:
        return dict(ZOO_ATARI), "rl_zoo3 not installed: ZOO_ATARI, copied from rl_zoo3 2.9.2"
    path = pathlib.Path(found.submodule_search_locations[0]) / "hyperparams" / "ppo.yml"
    version = importlib.metadata.version("rl_zoo3")
    return yaml.safe_load(path.read_text())["atari"], f"rl_zoo3 {version} {path}"


def linear(initial: float) -> Callable[[float], float]:
    """The Zoo's SimpleLinearSchedule: `initial` times the progress remaining, 1 down to 0."""
    return lambda progress_remaining: progress_remaining * initial


def sb3_settings(entry: dict) -> tuple[dict, dict]:
    """The Zoo's entry split as its ExperimentManager splits it: env settings, PPO's keywords."""
    kwargs = dict(entry)
    wrappers = kwargs.pop("env_wrapper")
    if wrappers not in ([ATARI_WRAPPER], ATARI_WRAPPER):
        raise SystemExit(f"the Zoo's atari entry wraps its envs in {wrappers!r}, not AtariWrapper")
    env = {key: kwargs.pop(key) for key in ("n_envs", "frame_stack")}
    kwargs.pop("n_timesteps")  # The budget; the timed learn() calls set theirs.
    for key in ("learning_rate", "clip_range", "clip_range_vf"):
        if isinstance(kwargs.get(key), str):  # "lin_<value>", as _preprocess_schedules reads.
            kwargs[key] = linear(float(kwargs[key].split("_")[1]))
    return env, kwargs


def make_game(**kwargs) -> gym.Env:
    """One SB3_ENV game, as the Zoo's make_env makes it: in whichever process steps it."""
    gym.register_envs(ale_py)
    return gym.make(SB3_ENV, **kwargs)


class RolloutClock(BaseCallback):
    """Sums the seconds of SB3's rollouts: collection, apart from learning."""

    def __init__(self):
        super().__init__()
        self.collect_seconds = 0.0
        self.started = 0.0

    def _on_rollout_start(self) -> None:
        self.started = time.perf_counter()

    def _on_rollout_end(self) -> None:
        self.collect_seconds += time.perf_counter() - self.started

    def _on_step(self) -> bool:
        return True


class Sb3Peer:
    """SB3's PPO on the Zoo's Atari envs over one vec env class."""

    def __init__(self, vec_env_cls: type, env_settings: dict, ppo_kwargs: dict):
        env = make_atari_env(
            make_game,
            n_envs=env_settings["n_envs"],
            seed=0,
            env_kwargs=SB3_ENV_KWARGS,
            vec_env_cls=vec_env_cls,
        )
        self.env = VecFrameStack(env, env_settings["frame_stack"])
        kwargs = dict(ppo_kwargs)
        policy = kwargs.pop("policy")
        self.model = PPO(policy, self.env, device="cpu", seed=0, verbose=0, **kwargs)
        self.model.set_logger(Logger(folder=None, output_formats=[]))  # No SB3-* dirs.
        self.steps_per_update = self.model.n_steps * self.env.num_envs
        self.torch_threads = torch.get_num_threads()
        self.collect_seconds: list[float] = []  # Each train() call's, the warm-up's first.

    def train(self, updates: int) -> float:
        """Trains `updates` updates; their seconds."""
        clock = RolloutClock()
        start = time.perf_counter()
        self.model.learn(
            updates * self.steps_per_update,
            callback=clock,
            reset_num_timesteps=self.model.num_timesteps == 0,
        )
        self.collect_seconds.append(clock.collect_seconds)
        return time.perf_counter() - start

    def close(self) -> None:
        self.env.close()


class BatchrlPeer:
    """The preset's run as the train command builds it, in train phases of one update."""

    def __init__(self, config):
        # Imported once api.limit_xla_threads has run: they start JAX's backends.
        from batchrl.training import environments, loop

        env, self.batch_env = environments.build(config)
        evaluation = environments.build_eval(config)  # Atari evaluates on envs of its own.
        self.eval_batch_env = evaluation[1]
        steps = config.algorithm.steps_per_update  # One update a phase.
        self.programs, self.state = loop.build(
            config, env, eval_env=evaluation[0], train_steps=steps, eval_steps=1
        )
        self.steps_per_update = steps * config.num_envs

    def train(self, updates: int) -> float:
        """Trains `updates` phases of one update each; their seconds."""
        from batchrl.training import loop

        start = time.perf_counter()
        for _ in range(updates):
            self.state, _ = loop.run_phase(self.programs, self.state)
        return time.perf_counter() - start

    def close(self) -> None:
        self.batch_env.close()
        self.eval_batch_env.close()


def measure(peers: dict, rounds: int, updates: int) -> dict:
    """Each peer's warm-up seconds, then its seconds per round of `updates` updates."""
    warm_up = {}
    for name, peer in peers.items():
        warm_up[name] = round(peer.train(1), 2)  # batchrl's includes the compile.
    seconds: dict[str, list[float]] = {name: [] for name in peers}
    names = list(peers)
    for round_ in range(rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            seconds[name].append(peers[name].train(updates))
    return {"warm_up_seconds": warm_up, "seconds": seconds}


def summary(peers: dict, measured: dict, updates: int) -> dict:
    rates, results = {}, {}
    for name, peer in peers.items():
        steps = updates * peer.steps_per_update
        times = measured["seconds"][name]
        rates[name] = len(times) * steps / sum(times)
        results[name] = {
            "warm_up_seconds": measured["warm_up_seconds"][name],
            "timed_env_steps": len(times) * steps,
            "round_seconds": [round(s, 2) for s in times],
            "env_steps_per_sec_per_round": [round(steps / s, 1) for s in times],
            "env_steps_per_sec": round(rates[name], 1),
            "seconds_per_update": round(sum(times) / (len(times) * updates), 2),
        }
        if isinstance(peer, Sb3Peer):
            results[name]["collect_share"] = round(sum(peer.collect_seconds[1:]) / sum(times), 3)
            results[name]["torch_threads"] = peer.torch_threads
    sb3 = {name: rate for name, rate in rates.items() if name != OURS}
    best = max(sb3, key=sb3.get)
    return {
        "results": results,
        "best_sb3": best,
        "batchrl_over_best_sb3": round(rates[OURS] / sb3[best], 3),
        # The same steps a round: the rates' ratio is SB3's seconds over batchrl's.
        "batchrl_over_best_sb3_per_round": [
            round(theirs / ours, 3)
            for ours, theirs in zip(
                measured["seconds"][OURS], measured["seconds"][best], strict=True
            )
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating timed rounds")
    parser.add_argument("--updates", type=int, default=3, help="timed updates a peer a round")
    parser.add_argument("--sb3", nargs="+", choices=["dummy", "subproc"], default=None)
    parser.add_argument("--quick", action="store_true", help="one round of one update")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.updates = 1, 1
    for name in ("rounds", "updates"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name} must be at least 1, got {getattr(args, name)}")
    warnings.filterwarnings("ignore")
    config = presets.get(PRESET)
    api.limit_xla_threads(config)  # As the train command: before JAX starts.
    entry, source = zoo_atari()
    env_settings, ppo_kwargs = sb3_settings(entry)
    classes = {"dummy": DummyVecEnv, "subproc": SubprocVecEnv}
    peers: dict = {}
    try:
        # SB3's worker processes start before JAX and ale-py's threads do.
        for kind in args.sb3 or list(classes):
            peers[f"sb3_{kind}_vec_env"] = Sb3Peer(classes[kind], env_settings, ppo_kwargs)
        peers = {OURS: BatchrlPeer(config), **peers}
        sizes = {name: peer.steps_per_update for name, peer in peers.items()}
        if len(set(sizes.values())) != 1:
            raise SystemExit(f"the peers' updates differ in env steps: {sizes}")
        measured = measure(peers, args.rounds, args.updates)
    finally:
        for peer in peers.values():
            peer.close()
    from batchrl.scripts import provenance

    versions = {}
    for package in ("torch", "stable_baselines3", "ale_py", "rl_zoo3"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    record = {
        "benchmark": "atari_training",
        "machine": provenance.machine(),
        "versions": versions,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "batchrl_preset": PRESET,
        "sb3_env": SB3_ENV,
        "sb3_env_kwargs": SB3_ENV_KWARGS,
        "zoo_settings": {key: value for key, value in entry.items() if key != "env_wrapper"},
        "zoo_settings_source": source,
        "rounds": args.rounds,
        "updates_per_round": args.updates,
        "env_steps_per_update": next(iter(sizes.values())),
        **summary(peers, measured, args.updates),
    }
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
