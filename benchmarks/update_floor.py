"""The least time a preset's updates can take on this CPU: their matrix products at XLA's rate.

On a CPU the update of the MLP presets is mostly matrix products, so its FLOPs and the
rate XLA reaches on the same shapes bound how fast a phase can train, however the rest is
arranged. For each preset this prints one JSON line:

- `update_gflop_per_phase`: the products of one phase's updates: a forward and a backward
  pass of the policy and value MLPs on every sample of every epoch. A lower bound:
  elementwise work, the optimiser and the passes an update takes once (old log-probs,
  values, the KL after it) are left out.
- `gflops`: the rate XLA reaches here on a gradient step of the same MLPs on one
  minibatch (SGD steps in one compiled loop, timed after a warm-up), with XLA's threads
  as the train command sets them for the preset, on JAX's default device: where the
  learner runs by default, a GPU where there is one (the line's `devices` says which).
- `floor_phase_seconds`: the two's ratio; `phase_seconds`: a phase's train seconds as the
  train command trains it (in memory, the mean of the phases after the first).
- with `--seeds N --steps S`: `together`, one seed's train command of S steps timed (a
  fresh process, as `seeds_together.py` times it) and the least wall time of N seeds
  trained together (`training.together`): that one's, plus N - 1 times its products.

Each preset runs in a fresh process. A phase's products are its env steps times the
epochs times a sample's FLOPs, whatever the episodes' lengths (rows padded past an
episode's end add more); the seed's episode memory is shown as full-length episodes
(Pendulum's and HalfCheetah's always are) in `samples_per_update` and `updates_per_phase`.

    python benchmarks/update_floor.py                                  # four presets
    python benchmarks/update_floor.py --presets pendulum_jax --seeds 10 --steps 102000
    python benchmarks/update_floor.py --quick                          # checks that it runs
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import subprocess
import sys
import tempfile
import time

import accelerator_check
import core_scaling
import seeds_together

PRESETS = ["pendulum_jax", "cheetah", "cheetah_clipped", "humanoid"]


def mlp_flops(sizes: list[int]) -> int:
    """FLOPs of one sample's forward pass through dense layers of `sizes` (in, ..., out)."""
    return sum(2 * a * b for a, b in itertools.pairwise(sizes))


def gradient_flops(sizes: list[int]) -> int:
    """FLOPs of one sample's forward and backward pass through dense layers of `sizes`.

    The backward pass computes every layer's weight gradient and, but for the first
    layer's, its input's.
    """
    return 3 * mlp_flops(sizes) - 2 * sizes[0] * sizes[1]


def shapes(config) -> dict:
    """The sizes an update computes on: its MLPs, samples, minibatch, updates a phase."""
    import math

    from batchrl.training import environments

    spec = environments.check_env(config)  # One env, built as training builds it.
    leaf = spec.observation
    if getattr(leaf, "kind", None) != "vector" or len(leaf.shape) != 1:
        raise ValueError(
            f"update_floor counts MLPs on one vector observation, got {leaf} for {config.env}"
        )
    obs = leaf.shape[0]
    # A categorical policy's logits, or a Gaussian policy's mean.
    actions = spec.num_actions if spec.discrete else math.prod(spec.action_shape)
    algorithm = config.algorithm
    phase = config.batch_steps_per_phase * config.num_envs
    if algorithm.objective == "clipped":
        samples = config.num_envs * algorithm.steps_per_update
        minibatch = samples // algorithm.num_minibatches
    else:  # The seed's episode memory: `update_every` whole episodes.
        samples = algorithm.update_every * config.max_length
        minibatch = algorithm.batch_size * algorithm.chunk(config.max_length)
    return {
        "policy": [obs, *algorithm.policy_layers, actions],
        "value": [obs, *algorithm.value_layers, 1],
        "activation": algorithm.activation,
        "samples_per_update": samples,
        "minibatch": minibatch,
        "epochs": algorithm.update_epochs,
        "updates_per_phase": phase / samples,
        "phase_steps": phase,
    }


def gflops(sizes: dict, seconds: float) -> float:
    """XLA's rate here, GFLOP/s, on SGD steps of the policy and value MLPs on one minibatch."""
    import jax
    import jax.numpy as jnp

    act = jnp.tanh if sizes["activation"] == "tanh" else jax.nn.relu
    keys = iter(jax.random.split(jax.random.key(0), 64))

    def init(layers: list[int]) -> list:
        return [
            (jax.random.normal(next(keys), (a, b)) / a**0.5, jnp.zeros(b))
            for a, b in itertools.pairwise(layers)
        ]

    def forward(params: list, x: jax.Array) -> jax.Array:
        for w, b in params[:-1]:
            x = act(x @ w + b)
        w, b = params[-1]
        return x @ w + b

    def loss(params: tuple, x: jax.Array) -> jax.Array:
        policy, value = params
        return jnp.mean(forward(policy, x) ** 2) + jnp.mean(forward(value, x) ** 2)

    steps = 64

    @jax.jit
    def run(params: tuple, x: jax.Array) -> tuple:
        def sgd(params: tuple, _: None) -> tuple:
            grads = jax.grad(loss)(params, x)
            return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads), None

        return jax.lax.scan(sgd, params, None, length=steps)[0]

    params = (init(sizes["policy"]), init(sizes["value"]))
    x = jax.random.normal(next(keys), (sizes["minibatch"], sizes["policy"][0]))
    params = jax.block_until_ready(run(params, x))  # Compiles.
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        params = jax.block_until_ready(run(params, x))
        calls += 1
    per_sample = gradient_flops(sizes["policy"]) + gradient_flops(sizes["value"])
    return calls * steps * sizes["minibatch"] * per_sample / elapsed / 1e9


def child(preset: str, args: argparse.Namespace) -> None:
    """Measures one preset in this process and prints its JSON line."""
    from batchrl.training import api

    config = core_scaling.build_config(preset, core_scaling.DEFAULTS.get(preset, {}), args.phases)
    api.start(config, preset, None)  # The train command's XLA threads for this preset.
    sizes = shapes(config)
    per_sample = gradient_flops(sizes["policy"]) + gradient_flops(sizes["value"])
    per_phase = per_sample * sizes["samples_per_update"] * sizes["epochs"]
    per_phase *= sizes["updates_per_phase"] / 1e9
    rate = gflops(sizes, args.seconds)
    floor = per_phase / rate
    from batchrl.training import run as run_lib  # Starts the env: after `start`.

    rows = run_lib.train(None, config).metrics
    phase_seconds = [row["perf/train_seconds"] for row in rows]
    line = {
        "benchmark": "update_floor",
        "preset": preset,
        "shapes": sizes,
        "update_gflop_per_phase": round(per_phase, 2),
        "gflops": round(rate, 1),
        "floor_phase_seconds": round(floor, 3),
        "phase_seconds": round(sum(phase_seconds[1:]) / len(phase_seconds[1:]), 3),
        "phase_seconds_each": [round(seconds, 3) for seconds in phase_seconds],
    }
    line["floor_share_of_phase"] = round(floor / line["phase_seconds"], 3)
    line.update(accelerator_check.versions(), commit=accelerator_check.commit())
    print(json.dumps(line), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="*", default=PRESETS)
    parser.add_argument("--phases", type=int, default=3, help="train phases timed a preset")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds the rate is timed")
    parser.add_argument("--seeds", type=int, help="N seeds for `together`, with --steps")
    parser.add_argument("--steps", type=int, help="each seed's env steps for `together`")
    parser.add_argument("--quick", action="store_true", help="2 phases, a 0.2 s rate")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if (args.seeds is None) != (args.steps is None):
        parser.error("--seeds and --steps go together: give both, or neither")
    if args.quick:
        args.phases, args.seconds = 2, 0.2
    if args.phases < 2:  # A phase after the first (which compiles) is timed.
        parser.error(f"--phases must be at least 2 (the first compiles), got {args.phases}")
    if args.seconds <= 0:
        parser.error(f"--seconds must be positive, got {args.seconds:g}")
    if args.seeds is not None and (args.seeds < 2 or args.steps < 1):
        parser.error(
            f"--seeds must be 2 or more, --steps 1 or more: got {args.seeds}, {args.steps}"
        )
    from batchrl.scripts import exiting

    if args.child:
        exiting.terminate_with_parent()  # Ends with this script, killed or timed out.
        child(args.child, args)
        return 0
    exiting.sigterm_exits()
    failed = 0
    for preset in args.presets:
        command = [sys.executable, __file__, "--child", preset, "--phases", str(args.phases)]
        command += ["--seconds", str(args.seconds)]
        if args.seeds and args.steps:
            command += ["--seeds", str(args.seeds), "--steps", str(args.steps)]
        done = subprocess.run(command, capture_output=True, text=True, env=exiting.with_parent())
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:  # The child's own error: its last line says why.
            failed += 1
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"update_floor: {preset}: {last}", file=sys.stderr)
            continue
        line = json.loads(lines[-1])
        if args.seeds and args.steps:
            line["together"] = together_bound(preset, line, args.seeds, args.steps)
        print(json.dumps(line), flush=True)
    return 1 if failed else 0


def together_bound(preset: str, line: dict, seeds: int, steps: int) -> dict:
    """The least wall time of `seeds` seeds of `steps` each trained together, from one's.

    One seed's train command is timed here, a fresh process (start, compiles and
    evaluations included), as `seeds_together.py` times it. A together-run does all that
    one seed's run does at least once, and N times its updates' products: its wall time
    is at least one seed's plus N - 1 times that seed's products at this CPU's rate.
    """
    settings = [f"{key}={value}" for key, value in core_scaling.DEFAULTS.get(preset, {}).items()]
    with tempfile.TemporaryDirectory() as folder:
        one = seeds_together.timed_train(
            pathlib.Path(folder), preset, ["--seed", "0"], [*settings, f"steps={steps}"]
        )
    products = steps / line["shapes"]["phase_steps"] * line["floor_phase_seconds"]
    least = one + (seeds - 1) * products
    return {
        "seeds": seeds,
        "steps": steps,
        "one_seed_seconds": one,
        "one_seed_products_seconds": round(products, 2),
        "least_seconds": round(least, 1),
        "least_over_one_seed": round(least / one, 2),
    }


if __name__ == "__main__":
    sys.exit(main())
