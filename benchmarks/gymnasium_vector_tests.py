"""Gymnasium's own vector tests, run with `BatchEnv` in `AsyncVectorEnv`'s place.

Gymnasium's wheel holds no tests, so this runs a checkout of its repository's
`tests/vector` at the installed version, outside this repository, with the plugin
`benchmarks/gymnasium_vector_swap.py`, and prints one JSON line: the counts of tests
passed, failed and skipped, and the failed tests' names.

    git clone --depth 1 --branch v1.3.0 https://github.com/Farama-Foundation/Gymnasium /tmp/gym
    python benchmarks/gymnasium_vector_tests.py /tmp/gym
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys

import gymnasium

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=pathlib.Path, help="Gymnasium's repository (its tests/)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds a test may take")
    args = parser.parse_args()
    tests = args.checkout / "tests" / "vector"
    if not tests.is_dir():
        parser.error(f"{tests} is not a folder: give a checkout of Gymnasium's repository")
    env = {
        **os.environ,
        # The caller's PYTHONPATH kept after these: a Gymnasium put there is the one tested.
        "PYTHONPATH": os.pathsep.join(
            [
                str(ROOT),
                str(ROOT / "benchmarks"),
                str(args.checkout),
                os.environ.get("PYTHONPATH", ""),
            ]
        ),
    }
    command = [
        sys.executable, "-m", "pytest", str(tests), "-p", "gymnasium_vector_swap", "-q", "-rfE",
        "-p", "no:cacheprovider", "-n", "0", f"--timeout={args.timeout:g}",
        f"--rootdir={args.checkout}", "-c", os.devnull,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=args.checkout, env=env, capture_output=True, text=True)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
    counts = {
        kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|error)", summary)
    }
    found = re.findall(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", done.stdout, re.M)
    failed = sorted(set(found))
    line = {
        "benchmark": "gymnasium_vector_tests",
        "gymnasium": gymnasium.__version__,
        **counts,
        "failed_tests": failed,
        "summary": summary,
        "pytest_exit_code": done.returncode,
    }
    print(json.dumps(line))
    # pytest's 0 and 1: the tests ran (1: some failed, listed); anything else: they did not.
    return 0 if done.returncode in (0, 1) else 1


if __name__ == "__main__":
    sys.exit(main())
