"""Free host memory as this process may use it: the machine's, or its cgroup's if less.

In a container or a batch job (Docker's `--memory`, Kubernetes limits, Slurm) the kernel
kills a process that passes its cgroup's memory limit, whatever the machine has free;
`/proc/meminfo` shows the machine. A storage checked against the machine alone would
pass the check and then die unsaid, so the limit of every cgroup above the process
counts too, less what it holds beyond reclaimable file pages.
"""

from __future__ import annotations

import pathlib

_UNLIMITED = 2**62  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1.


def free_bytes(proc: str = "/proc", cgroups: str = "/sys/fs/cgroup") -> int | None:
    """The least of the machine's available memory and its cgroups' room; None if unread."""
    rooms = (_meminfo_available(proc), cgroup_room(proc, cgroups))
    found = [room for room in rooms if room is not None]
    return min(found) if found else None


def cgroup_room(proc: str = "/proc", cgroups: str = "/sys/fs/cgroup") -> int | None:
    """Bytes left under the tightest memory limit of this process's cgroups; None if none.

    Reads cgroup v2 (`memory.max`, `memory.current`) or v1 (`memory.limit_in_bytes`,
    `memory.usage_in_bytes`) from the process's cgroup up to the hierarchy's root, the
    inactive file pages the kernel reclaims before it kills counted as room. A cgroup
    path not under the mount (a container's own cgroup mounted as the root) starts at
    the deepest folder that exists.
    """
    try:
        lines = pathlib.Path(proc, "self", "cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and pathlib.Path(cgroups, "memory.max").exists():
            return _tightest(pathlib.Path(cgroups), path, "memory.max", "memory.current")
        if "memory" in controllers.split(","):
            root = pathlib.Path(cgroups, "memory")
            return _tightest(root, path, "memory.limit_in_bytes", "memory.usage_in_bytes")
    return None


def _tightest(root: pathlib.Path, path: str, limit_file: str, usage_file: str) -> int | None:
    folder = root.joinpath(*[part for part in path.split("/") if part])
    while folder != root and not folder.is_dir():
        folder = folder.parent
    rooms = []
    while True:
        room = _room(folder, limit_file, usage_file)
        if room is not None:
            rooms.append(room)
        if folder == root:
            return min(rooms) if rooms else None
        folder = folder.parent


def _room(folder: pathlib.Path, limit_file: str, usage_file: str) -> int | None:
    try:
        limit = (folder / limit_file).read_text().strip()
        usage = int((folder / usage_file).read_text())
    except (OSError, ValueError):
        return None
    if limit == "max" or int(limit) >= _UNLIMITED:
        return None
    stat = _stat(folder / "memory.stat")
    reclaimable = stat.get("total_inactive_file", stat.get("inactive_file", 0))
    return max(int(limit) - (usage - reclaimable), 0)


def _stat(path: pathlib.Path) -> dict[str, int]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    pairs = (line.split() for line in lines)
    return {pair[0]: int(pair[1]) for pair in pairs if len(pair) == 2 and pair[1].isdigit()}


def _meminfo_available(proc: str) -> int | None:
    try:
        with open(pathlib.Path(proc, "meminfo")) as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
