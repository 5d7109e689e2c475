"""The RL Zoo's tuned PPO (Stable-Baselines3) on this machine, evaluated as batchrl's runs are.

    pip install rl_zoo3
    python benchmarks/rl_zoo.py --logdir runs/zoo --envs HalfCheetah-v5 Hopper-v5 --seeds 0 1 2

Each run is the Zoo's own command, `python -m rl_zoo3.train --algo ppo --env ID --seed S`,
with the hyperparameters its ppo.yml gives the task's v4 id, keyed by the v5 id in a
file of ours (`--conf-file`): the Zoo knows only the v4 ids and would train a v5 id with
its defaults. The Zoo evaluates every `--eval-freq` env steps (mean action, 10
episodes); the final policy is then evaluated as batchrl's final policy is (mean action,
16 episodes, observations normalised with the run's frozen statistics). Prints one JSON
line a run, with the fields of batchrl.scripts.sweep's lines, so `batchrl.scripts.stats`
reads both; a run folder that holds a finished run is evaluated again, not retrained.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import time

import numpy as np
import yaml

from batchrl.scripts import provenance

FINAL_EPISODES = 16


def zoo_hyperparameters(env_id: str) -> dict:
    """The Zoo's PPO settings for `env_id`'s v4 twin, as its ppo.yml holds them."""
    import rl_zoo3

    path = pathlib.Path(rl_zoo3.__file__).parent / "hyperparams" / "ppo.yml"
    settings = yaml.safe_load(path.read_text())
    twin = env_id.replace("-v5", "-v4")
    if twin not in settings:
        raise SystemExit(f"the RL Zoo has no PPO settings for {twin!r}")
    return settings[twin]


def train(env_id: str, seed: int, folder: pathlib.Path, steps: int, eval_freq: int) -> float:
    """Runs the Zoo's train command for one env and seed; its wall-clock seconds."""
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "ppo_v5.yml"
    conf.write_text(yaml.safe_dump({env_id: zoo_hyperparameters(env_id)}))
    command = [
        sys.executable, "-m", "rl_zoo3.train", "--algo", "ppo", "--env", env_id,
        "--seed", str(seed), "--conf-file", str(conf), "--log-folder", str(folder),
        "--n-timesteps", str(steps), "--eval-freq", str(eval_freq), "--eval-episodes", "10",
        "--n-eval-envs", "1", "--device", "cpu", "--verbose", "0",
    ]  # fmt: skip
    start = time.perf_counter()
    with open(folder / "train.log", "w") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
    return time.perf_counter() - start


def run_folder(folder: pathlib.Path, env_id: str) -> pathlib.Path:
    """The folder the Zoo wrote the run into: LOGDIR/ppo/<env_id>_<n>."""
    (found,) = sorted((folder / "ppo").glob(f"{env_id}_*"))
    return found


def trained_steps(run: pathlib.Path, env_id: str) -> int | None:
    """The budget (`-n`) the Zoo's run was started with, from the args it saved."""
    saved = (run / env_id / "args.yml").read_text()
    found = re.search(r"- - n_timesteps\n\s+- (\d+)", saved)
    return None if found is None else int(found.group(1))


def final_return(run: pathlib.Path, env_id: str, seed: int) -> float:
    """The final policy's mean-action return over FINAL_EPISODES episodes."""
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    env = VecNormalize.load(
        str(run / env_id / "vecnormalize.pkl"), DummyVecEnv([lambda: gym.make(env_id)])
    )
    env.training, env.norm_reward = False, False
    model = PPO.load(str(run / f"{env_id}.zip"), device="cpu")
    returns = []
    for episode in range(FINAL_EPISODES):
        env.seed(seed + episode)
        obs, done, total = env.reset(), False, 0.0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, dones, _ = env.step(action)
            total += float(env.get_original_reward()[0])
            done = bool(dones[0])
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def eval_curve(run: pathlib.Path) -> list[list[float]]:
    """[[env steps, mean eval return, wall seconds]] of the Zoo's evaluations.

    The wall seconds are the training monitor's clock at the step each evaluation ran.
    """
    data = np.load(run / "evaluations.npz")
    monitor = np.atleast_2d(np.genfromtxt(run / "0.monitor.csv", delimiter=",", skip_header=2))
    steps_done, clock = np.cumsum(monitor[:, 1]), monitor[:, 2]
    curve = []
    for steps, results in zip(data["timesteps"], data["results"], strict=True):
        curve.append(
            [int(steps), float(np.mean(results)), float(np.interp(steps, steps_done, clock))]
        )
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", required=True, type=pathlib.Path)
    parser.add_argument("--envs", nargs="+", default=["HalfCheetah-v5", "Hopper-v5"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--eval-freq", type=int, default=50_000)
    args = parser.parse_args()
    if importlib.util.find_spec("rl_zoo3") is None:  # Before any run folder is made.
        parser.error("the peer, the RL Zoo, is not installed: pip install rl_zoo3")
    os.environ.setdefault("MUJOCO_GL", "egl")
    for env_id in args.envs:
        for seed in args.seeds:
            folder = args.logdir / f"seed{seed}-{env_id}"
            done = list((folder / "ppo").glob(f"{env_id}_*/{env_id}.zip"))
            trained = trained_steps(run_folder(folder, env_id), env_id) if done else None
            if trained is not None and trained != args.steps:
                sys.exit(
                    f"rl_zoo: {folder} finished a run of {trained:,} steps, not "
                    f"--steps {args.steps:,}: give another --logdir"
                )
            seconds = None if done else train(env_id, seed, folder, args.steps, args.eval_freq)
            run = run_folder(folder, env_id)
            curve = eval_curve(run)
            row = {
                "benchmark": "learning",
                "library": "rl_zoo3",
                "config": env_id,
                "seed": seed,
                "env_steps": args.steps,
                "finished": True,
                "final_return": final_return(run, env_id, seed),
                "final_episodes": FINAL_EPISODES,
                "best_eval_return": max(point[1] for point in curve),
                "wall_seconds": None if seconds is None else round(seconds, 1),
                "eval_curve": curve,
                "machine": provenance.machine(),
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
