"""Training through crashing env workers: SIGKILL a random worker every few seconds.

Prints one JSON line. Runs the train command twice with the same seed, each in its own
folder: once undisturbed, once with `--set restart_workers=true` while this script kills
a random env worker of it with SIGKILL every `--every` seconds (workers alive for at
least SETTLED seconds, from the first phase on). Reports whether each run finished, the kills
and the restarts the run counted, both final returns, and any process of either run
still alive after it exited.

    pip install -e '.[test]'   # psutil
    python benchmarks/chaos.py [--config cheetah_clipped] [--seed 0] [--every 5]
        [--logdir runs/chaos] [--steps N]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import subprocess
import sys
import time

import psutil

from batchrl import conftest  # wait_gone: the test suite's check for orphans
from batchrl.scripts import exiting, provenance
from batchrl.training import metrics_log

# Seconds a worker lives before it may be killed: a worker of the train command takes up to
# a second to start (it imports the command's module, JAX with it, before it builds its
# envs), and one killed while it starts is replaced only a few times in a row.
SETTLED = 3.0


def env_workers(train: psutil.Process) -> list[psutil.Process]:
    """The env worker processes of a train process: children of its forkserver."""
    workers = []
    for process in train.children(recursive=True):
        try:
            parent = process.parent()
            if parent is not None and "multiprocessing.forkserver" in " ".join(parent.cmdline()):
                workers.append(process)
        except psutil.NoSuchProcess:
            pass
    return workers


def run(logdir: pathlib.Path, args: argparse.Namespace, every: float | None) -> dict:
    """One train run; kills a random worker every `every` seconds when set."""
    command = [sys.executable, "-m", "batchrl.scripts.train", "--logdir", str(logdir)]
    command += ["--config", args.config, "--seed", str(args.seed), "--timestamp", "run"]
    if args.steps:
        command += ["--set", f"steps={args.steps}"]
    if every is not None:
        command += ["--set", "restart_workers=true"]
    start = time.perf_counter()
    logdir.mkdir(parents=True, exist_ok=True)
    log = logdir / "stderr.txt"  # A file, not a pipe: a full pipe would stall the run.
    with log.open("w") as stderr:
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=stderr, env=exiting.with_parent()
        )
    train = psutil.Process(process.pid)
    rng, kills, descendants = random.Random(args.seed), 0, set()
    metrics = logdir / f"run-{args.config}" / "metrics.jsonl"
    next_kill = time.monotonic() + (every or 0.0)
    while process.poll() is None:
        time.sleep(0.2)
        try:
            descendants |= {p.pid for p in train.children(recursive=True)}
        except psutil.NoSuchProcess:
            break
        phases_done = metrics.exists() and metrics.stat().st_size > 0
        if every is None or time.monotonic() < next_kill or not phases_done:
            continue
        settled = [w for w in env_workers(train) if time.time() - w.create_time() > SETTLED]
        if settled:
            try:
                rng.choice(settled).kill()
                kills += 1
            except psutil.NoSuchProcess:
                pass
            next_kill = time.monotonic() + every
    process.wait()
    stderr = log.read_text()
    rows = metrics_log.read_jsonl(metrics) if metrics.exists() else []
    last = rows[-1] if rows else {}
    left = conftest.wait_gone(list(descendants), seconds=5.0)
    return {
        "exit_code": process.returncode,
        "finished": process.returncode == 0 and "final/return" in last,
        "kills": kills,
        "restarts": int(last.get("perf/worker_restarts", 0)),
        "env_steps": int(last.get("perf/env_steps", 0)),
        "final_return": last.get("final/return"),
        "wall_seconds": round(time.perf_counter() - start, 1),
        "processes_left": left,
        "error": stderr.strip().splitlines()[-1] if process.returncode else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="cheetah_clipped")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between kills")
    parser.add_argument("--steps", type=int, help="budget (default: the preset's)")
    parser.add_argument("--logdir", default="runs/chaos")
    args = parser.parse_args()
    logdir = pathlib.Path(args.logdir)
    for kind in ("calm", "kills"):  # A run there would be resumed, and its old result read.
        if (logdir / f"{args.config}-seed{args.seed}-{kind}").exists():
            parser.error(f"--logdir {args.logdir} holds this run already: give a new one")
    calm = run(logdir / f"{args.config}-seed{args.seed}-calm", args, None)
    chaos = run(logdir / f"{args.config}-seed{args.seed}-kills", args, args.every)
    print(
        json.dumps(
            {
                "benchmark": "chaos",
                "config": args.config,
                "seed": args.seed,
                "kill_every_seconds": args.every,
                "with_kills": chaos,
                "without_kills": calm,
                "machine": provenance.machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
