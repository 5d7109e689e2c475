"""End-to-end PPO training speed: batchrl against Stable-Baselines3, and time to solve Pendulum.

Prints one JSON line. On HalfCheetah-v5 in worker processes, env-steps/s of training
(collection and updates together) for batchrl's clipped PPO and, in the same run,
Stable-Baselines3's PPO with DummyVecEnv and SubprocVecEnv, all with the same
hyperparameters: 8 envs, n_steps 256, 64x64 tanh networks, 10 epochs, minibatch 64,
GAE 0.95, discount 0.99. SB3's PPO also runs on batchrl's `BatchEnv` through the SB3
adapter (`batchrl.envs.host.sb3.VecEnv`). batchrl's compile time is reported apart from its
steady rate; batchrl runs four times: all envs in workers, with `local_envs="auto"`, and on
`BatchEnv.mujoco` (the envs in MuJoCo's C threads, no worker process), there also with
acting overlapped with learning (`overlap="on"`, one policy version behind). Then the
wall-clock time, compilation included, for batchrl's clipped PPO on the
JAX-native Pendulum to reach an evaluation return of -200. Last, the train command's
`cheetah_clipped` and the seed's `cheetah` presets on each env backend (worker processes
and `BatchEnv.mujoco`), alternating backends over `--phases` timed train phases each.
The envs' physics alone (`physics_ceiling`: MuJoCo's C rollout, one thread and every
core) bounds what any trainer of them reaches here: its ratio to SB3 is the most a
trainer's can be; and batchrl's acting alone on the MuJoCo batch (`acting_only`, each
update one step on the whole rollout) bounds what overlapping the update can give.

    pip install -e '.[bench]'
    python benchmarks/ppo_throughput.py [--updates 5] [--phases 3] [--only-presets]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import time
import warnings

from batchrl.bridge import xla_threads

xla_threads.limit()  # Before JAX starts: its thread pool would take the workers' cores.

import accelerator_check  # noqa: E402
import gymnasium as gym  # noqa: E402
import jax  # noqa: E402

from batchrl import bridge  # noqa: E402
from batchrl.configs import TrainConfig, overrides, presets  # noqa: E402
from batchrl.envs import BatchEnv  # noqa: E402
from batchrl.envs.jax import classic, jax_env  # noqa: E402
from batchrl.ppo import config as config_lib  # noqa: E402
from batchrl.training import environments, loop  # noqa: E402

NUM_ENVS, N_STEPS, EPOCHS, MINIBATCH = 8, 256, 10, 64
ENV = "HalfCheetah-v5"


def batchrl_rate(
    updates: int,
    local_envs: int | str = 0,
    mujoco: bool = False,
    overlap: str = "off",
    acting_only: bool = False,
) -> dict:
    """Env-steps/s of the clipped PPO on worker envs or `BatchEnv.mujoco`, first phase apart.

    `local_envs` of the worker envs step in this process. With `overlap="on"` the envs act
    one policy version behind while the learner trains (`training.overlap`); the timed
    phase trains the update the first left pending and leaves its own last one pending,
    `updates` updates as without. `acting_only` makes each update one step on the whole
    rollout, not 10 epochs of minibatches of 64: the rate of acting, the update nearly free.
    """
    config = config_lib.ClippedConfig(
        steps_per_update=N_STEPS,
        update_epochs=1 if acting_only else EPOCHS,
        num_minibatches=1 if acting_only else NUM_ENVS * N_STEPS // MINIBATCH,
        policy_layers=(64, 64),
        value_layers=(64, 64),
        activation="tanh",
        gae_lambda=0.95,
        discount=0.99,
    )
    if mujoco:
        built = BatchEnv.mujoco(ENV, NUM_ENVS)
    else:
        built = BatchEnv.external(ENV, NUM_ENVS, local_envs=local_envs)
    with built as batch_env:
        env = bridge.InGraphBatchEnv(batch_env, seed=0)
        start = time.perf_counter()
        steps = N_STEPS * updates
        run = TrainConfig(
            algorithm=config, num_envs=NUM_ENVS, max_length=1000, steps=2 * steps, overlap=overlap
        )
        programs, state = loop.build(run, env, train_steps=steps, eval_steps=1)
        state, first = loop.run_phase(programs, state)  # Compiles, then trains `updates`.
        compile_and_first = time.perf_counter() - start
        _, steady = loop.run_phase(programs, state)
    return {
        "env_steps_per_sec": round(steady["perf/env_steps_per_sec"]),
        "first_phase_seconds_with_compile": round(compile_and_first, 1),
        "first_phase_env_steps_per_sec": round(first["perf/env_steps_per_sec"]),
    }


def sb3_rate(vec_env_cls: type | None, updates: int) -> float:
    """SB3's PPO on its own vec env class, or on a BatchEnv when `vec_env_cls` is None."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import Logger

    from batchrl.envs.host import sb3

    if vec_env_cls is None:
        env = sb3.VecEnv(BatchEnv.external(ENV, NUM_ENVS))
    else:
        env = make_vec_env(ENV, n_envs=NUM_ENVS, seed=0, vec_env_cls=vec_env_cls)
    try:
        model = PPO(
            "MlpPolicy",
            env,
            n_steps=N_STEPS,
            batch_size=MINIBATCH,
            n_epochs=EPOCHS,
            gae_lambda=0.95,
            gamma=0.99,
            policy_kwargs={"net_arch": [64, 64], "activation_fn": torch.nn.Tanh},
            device="cpu",
            seed=0,
            verbose=0,
        )
        model.set_logger(Logger(folder=None, output_formats=[]))  # No SB3-* dirs left in /tmp.
        model.learn(NUM_ENVS * N_STEPS)  # Warm-up: one update.
        steps = NUM_ENVS * N_STEPS * updates
        start = time.perf_counter()
        model.learn(steps, reset_num_timesteps=False)
        return steps / (time.perf_counter() - start)
    finally:
        env.close()


def pendulum_seconds_to(target: float, max_phases: int = 40) -> dict:
    config = config_lib.ClippedConfig(
        steps_per_update=128, num_minibatches=16, update_epochs=10, discount=0.95
    )
    start = time.perf_counter()
    env = jax_env.VmapBatch(classic.make("Pendulum-v1"), 32)
    run = TrainConfig(
        algorithm=config, num_envs=32, max_length=200, steps=max_phases * 128 * 5 * 32
    )
    programs, state = loop.build(run, env, train_steps=128 * 5, eval_steps=200)
    for _ in range(max_phases):
        state, metrics = loop.run_phase(programs, state, eval_episodes=1)
        if metrics["eval/return"] >= target:
            return {
                "seconds": round(time.perf_counter() - start, 1),
                "env_steps": int(metrics["perf/env_steps"]),
                "eval_return": round(metrics["eval/return"], 1),
            }
    return {"seconds": None, "env_steps": int(metrics["perf/env_steps"]), "eval_return": None}


def physics_ceiling(updates: int, repeats: int = 3) -> dict:
    """Env-steps/s of the envs' physics alone: no Python, no policy, no learning.

    The 8 HalfCheetahs' `frame_skip` MuJoCo steps per env step for the steps that
    `updates` updates act, from one start under random controls, in MuJoCo's C rollout
    on one thread and on every core: a rate no trainer of these envs on this machine
    passes, acting and learning on the same cores.
    """
    import mujoco
    import numpy as np
    from mujoco import rollout

    unwrapped = gym.make(ENV).unwrapped
    model, skip = unwrapped.model, unwrapped.frame_skip
    data = mujoco.MjData(model)
    full = mujoco.mjtState.mjSTATE_FULLPHYSICS
    start = np.empty(mujoco.mj_stateSize(model, full))
    mujoco.mj_getState(model, data, start, full)
    steps = N_STEPS * updates
    controls = np.random.default_rng(0).uniform(-1, 1, (NUM_ENVS, steps * skip, model.nu))
    starts = np.repeat(start[None], NUM_ENVS, axis=0)
    rates = {}
    for name, threads in (("one_thread", 1), ("all_cores", len(os.sched_getaffinity(0)))):
        datas = [mujoco.MjData(model) for _ in range(threads)]
        with rollout.Rollout(nthread=threads) as run:
            run.rollout([model] * NUM_ENVS, datas, starts, controls)  # Warm.
            rates[name] = []
            for _ in range(repeats):
                began = time.perf_counter()
                run.rollout([model] * NUM_ENVS, datas, starts, controls)
                rates[name].append(round(NUM_ENVS * steps / (time.perf_counter() - began)))
    return rates


def preset_rates(name: str, phases: int) -> dict:
    """Train env-steps/s of a preset on each backend, the backends alternating phase by phase."""
    backends = ("processes", "mujoco")
    runs = {}
    try:
        for backend in backends:
            config = overrides.parse_override(presets.get(name), f"backend={backend}")
            env, batch_env = environments.build(config)
            programs, state = loop.build(config, env, eval_steps=1)
            state, _ = loop.run_phase(programs, state)  # Compiles.
            runs[backend] = [programs, state, batch_env, []]
        for _ in range(phases):
            for backend in backends:
                run = runs[backend]
                run[1], metrics = loop.run_phase(run[0], run[1])
                run[3].append(round(metrics["perf/env_steps_per_sec"]))
    finally:
        for run in runs.values():
            run[2].close()
    rates = {backend: runs[backend][3] for backend in backends}
    ratios = [round(a / b, 2) for a, b in zip(rates["mujoco"], rates["processes"], strict=True)]
    return {"env_steps_per_sec": rates, "mujoco_over_processes": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=5, help="PPO updates timed per peer")
    parser.add_argument("--phases", type=int, default=3, help="train phases timed per backend")
    parser.add_argument("--only-presets", action="store_true", help="only the presets' rates")
    args = parser.parse_args()
    if not args.only_presets and importlib.util.find_spec("stable_baselines3") is None:
        parser.error("the peer, Stable-Baselines3, is not installed: pip install -e '.[bench]'")
    warnings.filterwarnings("ignore")
    on_backends = {name: preset_rates(name, args.phases) for name in ("cheetah_clipped", "cheetah")}
    if args.only_presets:
        print(json.dumps({"benchmark": "ppo_throughput", "presets_on_backends": on_backends}))
        return
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    pendulum = pendulum_seconds_to(-200.0)
    ours = batchrl_rate(args.updates)
    ours_local = batchrl_rate(args.updates, local_envs="auto")
    ours_mujoco = batchrl_rate(args.updates, mujoco=True)
    ours_overlap = batchrl_rate(args.updates, mujoco=True, overlap="on")
    ours_acting = batchrl_rate(args.updates, mujoco=True, acting_only=True)
    dummy = sb3_rate(DummyVecEnv, args.updates)
    subproc = sb3_rate(SubprocVecEnv, args.updates)
    on_batch_env = sb3_rate(None, args.updates)
    ceiling = physics_ceiling(args.updates)
    best, fastest = max(dummy, subproc), max(ceiling["all_cores"])
    print(
        json.dumps(
            {
                "benchmark": "ppo_throughput",
                "env": ENV,
                "hyperparameters": {
                    "num_envs": NUM_ENVS,
                    "n_steps": N_STEPS,
                    "networks": "64x64 tanh",
                    "epochs": EPOCHS,
                    "minibatch": MINIBATCH,
                    "gae_lambda": 0.95,
                    "discount": 0.99,
                },
                "batchrl_clipped": ours,
                "batchrl_clipped_local_envs": ours_local,
                "batchrl_clipped_mujoco_batch": ours_mujoco,
                "batchrl_clipped_mujoco_batch_overlap": ours_overlap,
                "batchrl_clipped_mujoco_batch_acting_only": ours_acting,
                "sb3_dummy_vec_env_steps_per_sec": round(dummy),
                "sb3_subproc_vec_env_steps_per_sec": round(subproc),
                "sb3_on_batch_env_steps_per_sec": round(on_batch_env),
                "sb3_on_batch_env_over_best_sb3_vec_env": round(on_batch_env / best, 2),
                "batchrl_over_best_sb3": round(ours["env_steps_per_sec"] / best, 2),
                "batchrl_local_envs_over_best_sb3": round(
                    ours_local["env_steps_per_sec"] / best, 2
                ),
                "batchrl_mujoco_batch_over_best_sb3": round(
                    ours_mujoco["env_steps_per_sec"] / best, 2
                ),
                "batchrl_mujoco_batch_overlap_over_best_sb3": round(
                    ours_overlap["env_steps_per_sec"] / best, 2
                ),
                "physics_ceiling_env_steps_per_sec": ceiling,
                "physics_ceiling_over_best_sb3": round(fastest / best, 2),
                "batchrl_mujoco_batch_overlap_over_physics_ceiling": round(
                    ours_overlap["env_steps_per_sec"] / fastest, 2
                ),
                "pendulum_jax_seconds_to_minus_200": pendulum,
                "presets_on_backends": on_backends,
                "jax": jax.__version__,
                "gymnasium": gym.__version__,
                "commit": accelerator_check.commit(),  # The docs' table picks rows by it.
                "date": datetime.date.today().isoformat(),
            }
        )
    )


if __name__ == "__main__":
    main()
