"""What the cgroup this process runs in allows it: memory and CPUs.

A container's ``--memory``/``--cpus`` and systemd's ``MemoryMax``/``CPUQuota`` are cgroup
limits; rtts sizes its memory budget (``memory.py``) and its ONNX Runtime threads by
them. Both cgroup v2 and v1 are read; inside a container the cgroup namespace shows
the container's own cgroup as the mount's root.

What the files say is read, never trusted to be well formed: a cgroup path is bytes (a
unit named ``kiosk-café`` is not ASCII, and need not be UTF-8), a value may be garbage.
Anything that cannot be read or makes no sense counts as no limit: the config is built
whatever the cgroup files hold.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

# A cgroup "limit" this large is no limit (v1 reports 2**63 rounded down to a page).
UNLIMITED = 1 << 60
PROC_CGROUP = Path("/proc/self/cgroup")
ROOT = Path("/sys/fs/cgroup")


def memory_limit(proc_cgroup: Path = PROC_CGROUP, root: Path = ROOT) -> int | None:
    """The memory limit (bytes) of the cgroup this process runs in, the smallest along
    its path up to the root, v2 (``memory.max``) or v1 (``memory.limit_in_bytes``);
    None outside any limit."""
    found: list[int] = []
    for controllers, path in _memberships(proc_cgroup):
        if controllers == "" and (root / "cgroup.controllers").exists():
            found += _limits(root, path, "memory.max")
        elif "memory" in controllers.split(","):
            found += _limits(root / "memory", path, "memory.limit_in_bytes")
    limits = [n for n in found if n < UNLIMITED]
    return min(limits) if limits else None


def _memberships(proc_cgroup: Path) -> list[tuple[str, str]]:
    """(controllers, path) for each line of /proc/self/cgroup ("" controllers: v2); none
    when it cannot be read."""
    try:
        # The path's bytes as the file system's names (surrogateescape): found as they are.
        lines = os.fsdecode(proc_cgroup.read_bytes()).splitlines()
    except OSError:
        return []
    return [tuple((line.split(":", 2) + ["", ""])[1:3]) for line in lines]  # type: ignore[misc]


def _limits(mount: Path, path: str, name: str) -> list[int]:
    out = []
    for raw in _values(mount, path, name):
        n = UNLIMITED if raw == "max" else _count(raw)
        if n is not None and n > 0:
            out.append(n)
    return out


def _count(raw: str) -> int | None:
    """A whole number as cgroup files write them (digits, maybe a sign); None otherwise."""
    try:
        return int(raw)
    except ValueError:
        return None


def _share(quota: str, period: str) -> float | None:
    """CPUs a quota over a period allows; None for no quota ("max", v1's -1) or nonsense
    (a period of 0, garbage)."""
    q, p = _count(quota), _count(period)
    return q / p if q is not None and p is not None and q > 0 and p > 0 else None


def _values(mount: Path, path: str, name: str) -> list[str]:
    """The contents of ``name`` from ``mount/path`` up to ``mount``. Inside a container
    the cgroup namespace shows the container's own cgroup as ``/`` and its path may not
    exist under the mount: then the mount's root is the container's cgroup."""
    out = []
    here = mount / path.lstrip("/")
    try:
        inside = here.is_dir()
    except (OSError, ValueError):  # a name too long for the file system, a NUL
        inside = False
    if not inside:
        here = mount
    while True:
        try:
            # Not ASCII: not a number either (replaced, then refused as one).
            out.append((here / name).read_text(encoding="ascii", errors="replace").strip())
        except (OSError, ValueError):
            pass
        if here == mount or mount not in here.parents:
            return out
        here = here.parent


def cpu_limit(proc_cgroup: Path = PROC_CGROUP, root: Path = ROOT) -> int | None:
    """CPUs the cgroup's quota allows (rounded up), the smallest along its path; None
    without a quota. A ``--cpus=2`` container on a 64-core host still sees 64 cores in
    its affinity mask: 64 ONNX Runtime threads then fight over two cores' worth of time."""
    quotas: list[float] = []
    for controllers, path in _memberships(proc_cgroup):
        if controllers == "" and (root / "cgroup.controllers").exists():
            for raw in _values(root, path, "cpu.max"):
                quota, _, period = raw.partition(" ")
                share = _share(quota, period)
                if share is not None:
                    quotas.append(share)
        elif "cpu" in controllers.split(","):
            mount = next((root / name for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu") if (root / name).is_dir()), None)
            if mount is None:
                continue
            periods = _values(mount, path, "cpu.cfs_period_us")
            for quota, period in zip(_values(mount, path, "cpu.cfs_quota_us"), periods):
                share = _share(quota, period)
                if share is not None:
                    quotas.append(share)
    return max(1, math.ceil(min(quotas))) if quotas else None
