"""A pixel preset's PPO update with lax's convolutions and with batchrl's.

Prints one JSON line. For each preset the train command's programs are built and one
update of the clipped objective (the preset's epochs of minibatches, a `lax.scan`) is
compiled and timed on the agent's rollout storage, twice in the same run: with the
convolutions of `lax.conv_general_dilated` (what a Flax CNN gets by default; XLA:CPU
runs their gradients inside loops slowly) and with `batchrl.networks.conv_matmul.conv`,
which computes them on CPU as patches and one matrix product (on other backends it is
lax's, so both variants are the same program). The update's values do not depend on the
data, so the storage is the fresh agent's. `env_steps_per_sec_update_bound` is the
rollout's env steps over one update: the most a run can train at, whatever the env costs.
The MinAtar presets read their grids with an MLP, so `breakout_minatar` is timed with the
MinAtar network (`OVERRIDES`).

    python benchmarks/cnn_update.py [--presets breakout_minatar breakout] [--repeats 3]
        [--variants lax batchrl]
"""

from __future__ import annotations

import argparse
import json
import time
from unittest import mock

import jax
from jax import lax

from batchrl.configs import overrides, presets
from batchrl.networks import conv_matmul
from batchrl.ppo import clipped
from batchrl.scripts import provenance
from batchrl.training import environments, loop

# The MinAtar presets' storage with the MinAtar network, as the presets had it before
# they took gymnax-blines' MLP.
MINATAR_NETWORK = [
    "algorithm.cnn=minatar",
    "algorithm.policy_layers=[]",
    "algorithm.value_layers=[]",
]
OVERRIDES = {"breakout_minatar": MINATAR_NETWORK}


VARIANTS = {"lax": lax.conv_general_dilated, "batchrl": conv_matmul.conv}


def update_seconds(name: str, repeats: int, variants: list[str]) -> dict:
    config = presets.get(name)
    for assignment in OVERRIDES.get(name, []):
        config = overrides.parse_override(config, assignment)
    env, batch_env = environments.build(config)
    try:
        programs, state = loop.build(config, env, eval_steps=1)
    finally:
        if batch_env is not None:
            batch_env.close()
    networks = programs.networks
    args = (state.agent.learner, state.agent.storage.rollout)
    update = lambda *args: clipped.update(networks, *args, state.agent.total_updates)  # noqa: E731
    seconds = {}
    for label in variants:
        convolve = VARIANTS[label]
        jax.clear_caches()  # Inner jitted functions would keep the other variant's trace.
        with mock.patch.object(conv_matmul, "conv", convolve):
            compiled = jax.jit(update).lower(*args).compile()  # Traced with `convolve`.
        jax.block_until_ready(compiled(*args))
        start = time.perf_counter()
        for _ in range(repeats):
            jax.block_until_ready(compiled(*args))
        seconds[label] = (time.perf_counter() - start) / repeats
    rows = config.num_envs * config.algorithm.steps_per_update
    result = {
        "preset": name,
        "overrides": OVERRIDES.get(name, []),
        "rows_per_update": rows,
        "minibatches": config.algorithm.num_minibatches,
        "epochs": config.algorithm.update_epochs,
        "update_seconds": {label: round(value, 3) for label, value in seconds.items()},
        "env_steps_per_sec_update_bound": {
            label: round(rows / value) for label, value in seconds.items()
        },
    }
    if len(seconds) == 2:
        result["speedup"] = round(seconds["lax"] / seconds["batchrl"], 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["breakout_minatar", "breakout"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        default=list(VARIANTS),
        help="the convolutions to time (lax's takes a minute or more an update)",
    )
    args = parser.parse_args()
    results = [update_seconds(name, args.repeats, args.variants) for name in args.presets]
    line = {"benchmark": "cnn_update", "machine": provenance.machine(), "results": results}
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
