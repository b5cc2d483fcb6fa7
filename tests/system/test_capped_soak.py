"""The articles' test, short: benchmarks/capped_soak.py for a minute in a 512 MB cap.

``rtts serve`` runs in a memory cgroup whose limit was set before it started (what
``docker run --memory=512m`` does), under mixed-language load with the longest allowed
Mandarin and Japanese requests. The inference process must not be OOM-killed (the
cgroup's own counter) and every request must be answered with audio or a documented
error. The full half hour is the benchmark's (docs/benchmarks.md). Needs root and a
writable memory cgroup; where there is none it is skipped and says why.

The file also checks, everywhere, how the benchmark finds a memory cgroup in
/proc/self/cgroup and /proc/self/mountinfo, v1 and v2 (this box has only v1)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import _CACHE

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import capped_soak  # noqa: E402

MOUNTS_V1 = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
CGROUP_V1 = "4:memory:/box/job\n1:cpu:/\n0::/\n"
# A container without a cgroup namespace: the mount's root is the container's own cgroup.
MOUNTS_V2 = "29 24 0:26 /docker/abc /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
CGROUP_V2 = "0::/docker/abc/app\n"


def test_finds_the_v1_memory_hierarchy_before_the_unified_one():
    files, path = capped_soak.own_memory_cgroup(CGROUP_V1, MOUNTS_V1)
    assert files.version == 1 and files.limit == "memory.limit_in_bytes"
    assert path == Path("/sys/fs/cgroup/memory/box/job")


def test_finds_a_v2_cgroup_relative_to_its_mount():
    files, path = capped_soak.own_memory_cgroup(CGROUP_V2, MOUNTS_V2)
    assert files.version == 2 and files.limit == "memory.max" and files.peak == "memory.peak"
    assert path == Path("/sys/fs/cgroup/app")


def test_no_memory_cgroup_is_none():
    assert capped_soak.own_memory_cgroup("1:cpu:/\n", MOUNTS_V1) is None


def test_reads_oom_kills_from_either_counter():
    assert capped_soak.stat_value("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill") == 3
    assert capped_soak.stat_value("low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\n", "oom_kill") == 2


def test_outcomes_that_count_as_answered():
    assert capped_soak.answered("audio") and capped_soak.answered("error:engine_unavailable")
    assert not capped_soak.answered("error:made_up") and not capped_soak.answered("no_answer")
    assert not capped_soak.answered("connection_lost") and not capped_soak.answered("no_audio")


@pytest.mark.slow
def test_under_512_mb():
    reason = capped_soak.unavailable_reason()
    if reason:
        pytest.skip(reason)
    opts = capped_soak.Options(minutes=1.0, cap_mb=512, cache_dir=_CACHE, drain_s=10.0)
    result = capped_soak.run_capped(opts)
    report = capped_soak.table(result)
    tried = {kind for kind in result["outcomes"] if not kind.startswith(("long", "wake"))}
    assert tried == set(capped_soak.KINDS), report
    assert any(kind.startswith("long") for kind in result["outcomes"]), report
    assert result["oom_kills"] == 0, report
    assert result["failed"] == 0 and result["failures"] == [], report
    assert result["server_alive_at_end"], report
    assert result["ok"], report
