import os
import pathlib
import subprocess
import sys
import time

import pytest

from batchrl.training import host_memory

GIB = 2**30


def _write(root: pathlib.Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cgroup_v2_limit_above_the_process_bounds_its_free_memory(tmp_path):
    # A Slurm-like job: the limit on the job's cgroup, none on its step's; page cache
    # the kernel would reclaim counts as room.
    _write(
        tmp_path,
        {
            "proc/self/cgroup": "0::/job/step\n",
            "proc/meminfo": f"MemAvailable: {60 * GIB // 1024} kB\n",
            "cg/memory.max": "",
            "cg/job/memory.max": f"{2 * GIB}\n",
            "cg/job/memory.current": f"{3 * GIB // 2}\n",
            "cg/job/memory.stat": f"anon 100\ninactive_file {GIB // 4}\n",
            "cg/job/step/memory.max": "max\n",
            "cg/job/step/memory.current": f"{GIB}\n",
        },
    )
    proc, cgroups = str(tmp_path / "proc"), str(tmp_path / "cg")
    assert host_memory.cgroup_room(proc, cgroups) == 2 * GIB - (3 * GIB // 2 - GIB // 4)
    assert host_memory.free_bytes(proc, cgroups) == 3 * GIB // 4


def test_a_container_without_a_limit_is_bounded_by_the_machine(tmp_path):
    # cgroup v1 as Docker mounts it: the process's host path is not under the mount,
    # whose root is the container's own cgroup; "no limit" is 2**63 - 1 rounded to pages.
    _write(
        tmp_path,
        {
            "proc/self/cgroup": "4:memory:/docker/abc\n0::/\n",
            "proc/meminfo": f"MemAvailable: {5 * GIB // 1024} kB\n",
            "cg/memory/memory.limit_in_bytes": "9223372036854771712\n",
            "cg/memory/memory.usage_in_bytes": f"{GIB}\n",
        },
    )
    proc, cgroups = str(tmp_path / "proc"), str(tmp_path / "cg")
    assert host_memory.cgroup_room(proc, cgroups) is None
    assert host_memory.free_bytes(proc, cgroups) == 5 * GIB
    _write(tmp_path, {"cg/memory/memory.limit_in_bytes": f"{2 * GIB}\n"})  # docker --memory=2g
    assert host_memory.free_bytes(proc, cgroups) == GIB


def _memory_cgroup(limit: int) -> pathlib.Path:
    """A new cgroup v1 memory group under this process's, limited to `limit` bytes."""
    lines = pathlib.Path("/proc/self/cgroup").read_text().splitlines()
    paths = [
        line.split(":", 2)[2] for line in lines if "memory" in line.split(":", 2)[1].split(",")
    ]
    if not paths:
        pytest.skip("no cgroup v1 memory controller here to make a limited group in")
    group = pathlib.Path(
        "/sys/fs/cgroup/memory", paths[0].lstrip("/"), f"batchrl-test-{os.getpid()}"
    )
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(limit))
    except OSError as error:
        if group.exists():
            group.rmdir()
        pytest.skip(f"cannot make a memory cgroup here: {error.strerror}")
    return group


def test_the_train_command_inside_a_memory_limit_refuses_what_would_pass_it(tmp_path):
    # A storage of 1.3 GiB in a group of 1 GiB: without the cgroup's limit the machine's
    # free memory passes the check, and the kernel kills the run with no word (exit -9)
    # when it allocates. (A storage just under the room passes, and its phase is refused
    # only once the storage is held: a margin too thin to test on, whatever the machine.)
    group = _memory_cgroup(GIB)
    command = [sys.executable, "-m", "batchrl.scripts.train", "--config", "pendulum_jax"]
    command += ["--logdir", str(tmp_path), "--set", "update_every=200000", "steps=1000"]
    try:
        result = subprocess.run(  # The shell joins the group, then becomes the command.
            ["sh", "-c", f'echo $$ > "{group}/cgroup.procs" && exec "$@"', "sh", *command],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        for _ in range(50):  # The group is busy for a moment after its last process.
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    assert result.returncode == 1, result.stderr[-2000:]
    assert result.stderr.count("\n") == 1
    assert "storage takes 1.3 GiB, more than the" in result.stderr
    assert "free on cpu" in result.stderr
