"""What keeping a phase costs the training thread: the gap between two phases beside the record.

A run keeps each phase (its metrics row, checkpoint and best) on a thread of its own
(`training.keeper_thread`) while the next phase trains. This trains a preset in a folder
and measures, in the same run, the seconds each `Keeper.record` takes on that thread
and the training thread's gap between one phase's end and the next one's start (the
last phase's gap, where the tail of an `average_last` policy is read, included). Prints
one JSON line, with the checkpoint's size.

    python benchmarks/between_phases.py                      # breakout, 5 phases of 1,024 steps
    python benchmarks/between_phases.py --preset cheetah_clipped --steps 40960 --set backend=mujoco
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time

import batchrl
from batchrl import configs
from batchrl.configs import overrides
from batchrl.scripts import provenance
from batchrl.training import keeper, loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="breakout")
    parser.add_argument("--steps", type=int, default=5120)
    parser.add_argument(
        "--set", action="append", dest="settings", help="key=value (default: phase_steps=1024)"
    )
    args = parser.parse_args()
    args.settings = args.settings or ["phase_steps=1024"]
    phases: list[tuple[float, float]] = []
    records: list[float] = []
    run_phase, record = loop.run_phase, keeper.Keeper.record

    def timed_phase(*given, **keywords):
        start = time.perf_counter()
        try:
            return run_phase(*given, **keywords)
        finally:
            phases.append((start, time.perf_counter()))

    def timed_record(self, *given, **keywords):
        start = time.perf_counter()
        try:
            return record(self, *given, **keywords)
        finally:
            records.append(time.perf_counter() - start)

    loop.run_phase, keeper.Keeper.record = timed_phase, timed_record
    config = overrides.parse_overrides(configs.get(args.preset), args.settings)
    with tempfile.TemporaryDirectory() as logdir:
        run = batchrl.train(config, steps=args.steps, logdir=logdir)
        sizes = [path.stat().st_size for path in (run.rundir / "checkpoints").glob("ckpt-*.bin")]
    gaps = [later[0] - earlier[1] for earlier, later in itertools.pairwise(phases)]
    print(
        json.dumps(
            {
                "benchmark": "between_phases",
                "preset": args.preset,
                "settings": args.settings,
                "phases": len(phases),
                "phase_seconds": [round(end - start, 3) for start, end in phases],
                "record_ms": [round(1e3 * value, 1) for value in records],
                "gap_ms": [round(1e3 * value, 1) for value in gaps],
                "median_record_ms": round(1e3 * statistics.median(records), 1),
                "median_gap_ms": round(1e3 * statistics.median(gaps), 1) if gaps else None,
                "checkpoint_bytes": max(sizes),
                "checkpoint_every": run.config.checkpoint_every,
                "commit": provenance.source_commit(),
                "machine": provenance.machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
