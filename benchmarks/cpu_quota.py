"""A slower box on this one: the server's processes held to a share of the CPUs by the
kernel's CFS quota (``listeners.py --cpu-quota``).

Busy loops beside the server (``--busy-cores``) make a busier box: the server's threads
still run at full speed whenever the scheduler gives them a core. A quota makes a slower
one: whatever the other processes do, the server's processes together get ``cores`` CPU
seconds a second, as a box with fewer or slower cores would give them. The period is
short (10 ms), so a quota spent stalls the server for the rest of 10 ms, not of the
default 100. The benchmark's own listeners stay outside it.

Needs root and a writable cgroup file system (cgroup v2's ``cpu.max`` where the ``cpu``
controller is enabled at its root, else v1's ``cpu`` hierarchy); where there is neither
it says so and the benchmark stops.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CpuQuota", "QuotaError"]

PERIOD_US = 10_000
_V2 = Path("/sys/fs/cgroup")
_V1 = Path("/sys/fs/cgroup/cpu")


class QuotaError(RuntimeError):
    """No cgroup to hold the server in."""


class CpuQuota:
    """A cgroup of its own, its processes held to ``cores`` CPUs."""

    def __init__(self, cores: float, name: str) -> None:
        if not cores > 0:
            raise QuotaError(f"--cpu-quota must be above 0, not {cores}")
        quota = f"{round(cores * PERIOD_US)}"
        if "cpu" in _read(_V2 / "cgroup.subtree_control").split():
            self.dir = _V2 / f"rtts-{name}-{os.getpid()}"
            files = {"cpu.max": f"{quota} {PERIOD_US}"}
        elif (_V1 / "cpu.cfs_quota_us").exists():
            self.dir = _V1 / f"rtts-{name}-{os.getpid()}"
            files = {"cpu.cfs_period_us": str(PERIOD_US), "cpu.cfs_quota_us": quota}
        else:
            raise QuotaError("no cgroup cpu controller to hold the server in (cgroup v2's cpu.max or v1's cpu)")
        try:
            self.dir.mkdir(exist_ok=True)
            for file, value in files.items():
                (self.dir / file).write_text(value)
        except OSError as exc:
            raise QuotaError(f"cannot set a CPU quota in {self.dir} (root?): {exc}") from exc
        self.cores = cores

    def close(self) -> None:
        """Remove the cgroup once its processes have ended."""
        try:
            self.dir.rmdir()
        except OSError:
            pass  # a process still in it: left for the kernel to hold until it ends


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
