"""How trained HalfCheetahs run: upright or on their back, beside their return.

    python benchmarks/cheetah_posture.py runs/ten/seed*-cheetah_clipped --episodes 8

Loads each run's last good checkpoint and runs its mean action for `--episodes`
episodes of HalfCheetah-v5 (seeds seed, seed + 1, ...). A step counts as on its back
when the torso's pitch has turned past a quarter turn (cos(pitch) < 0: obs[1] is the
pitch, x being left out of the observation); `pitch` is an episode's mean pitch of the
steps on its feet, in degrees (0: torso level; the sign is MuJoCo's about the y axis).
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import gymnasium as gym
import numpy as np

import batchrl
from batchrl.training import run_folder


def posture(rundir: pathlib.Path, episodes: int) -> dict:
    """The run's seed, and per episode its return, the fraction of steps on its back, pitch."""
    config = run_folder.read_config(rundir)
    policy = batchrl.load(rundir)
    env = gym.make(config.env, **config.env_kwargs)
    returns, on_back, pitch = [], [], []
    for episode in range(episodes):
        obs, _ = env.reset(seed=config.seed + episode)
        total, pitches, done = 0.0, [], False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy.act(obs))
            total += float(reward)
            pitches.append(float(obs[1]))
            done = terminated or truncated
        angles = np.arctan2(np.sin(pitches), np.cos(pitches))  # In (-pi, pi].
        upright = np.abs(angles) < np.pi / 2
        returns.append(round(total, 1))
        on_back.append(round(1.0 - upright.mean(), 3))
        pitch.append(round(float(np.degrees(angles[upright].mean())), 1) if upright.any() else None)
    env.close()
    return {
        "run": rundir.name,
        "seed": config.seed,
        "returns": returns,
        "on_back": on_back,
        "pitch": pitch,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=pathlib.Path, help="run folders")
    parser.add_argument("--episodes", type=int, default=8)
    args = parser.parse_args()
    results = [posture(run, args.episodes) for run in args.runs]
    print(json.dumps({"benchmark": "cheetah_posture", "results": results}))


if __name__ == "__main__":
    main()
