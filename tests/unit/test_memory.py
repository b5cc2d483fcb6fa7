"""The memory budget's decisions and the cgroup limit it defaults to (rtts/memory.py).

The same behaviour runs end to end, with real voices under a real budget, in
tests/live/test_memory_budget.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rtts import memory
from rtts.cgroup import cpu_limit
from rtts.cgroup import memory_limit as cgroup_limit
from rtts.config import Config
from rtts.memory import MB, Plan, budget_for, plan

pytestmark = pytest.mark.unit


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_v1_limit_is_the_smallest_on_the_path_up(tmp_path: Path) -> None:
    _tree(tmp_path, {
        "proc": "9:name=systemd:/\n4:memory:/box/rtts\n1:cpu:/\n",
        "cg/memory/memory.limit_in_bytes": "9223372036854771712\n",
        "cg/memory/box/memory.limit_in_bytes": str(768 * MB),
        "cg/memory/box/rtts/memory.limit_in_bytes": str(512 * MB),
    })
    assert cgroup_limit(tmp_path / "proc", tmp_path / "cg") == 512 * MB
    (tmp_path / "cg/memory/box/memory.limit_in_bytes").write_text(str(300 * MB))
    assert cgroup_limit(tmp_path / "proc", tmp_path / "cg") == 300 * MB  # a parent's cap binds its children


def test_v2_limit_and_max(tmp_path: Path) -> None:
    _tree(tmp_path, {
        "proc": "0::/system.slice/rtts.service\n",
        "cg/cgroup.controllers": "cpu memory pids\n",
        "cg/system.slice/memory.max": "max\n",
        "cg/system.slice/rtts.service/memory.max": str(1536 * MB),
    })
    assert cgroup_limit(tmp_path / "proc", tmp_path / "cg") == 1536 * MB
    (tmp_path / "cg/system.slice/rtts.service/memory.max").write_text("max\n")
    assert cgroup_limit(tmp_path / "proc", tmp_path / "cg") is None


def test_inside_a_container_the_mount_root_is_its_cgroup(tmp_path: Path) -> None:
    # The cgroup namespace names the container's own cgroup "/", or a path the
    # container's mount does not have: the mount's root holds its limit.
    _tree(tmp_path, {"proc": "4:memory:/libpod_parent/abc\n", "cg/memory/memory.limit_in_bytes": str(512 * MB)})
    assert cgroup_limit(tmp_path / "proc", tmp_path / "cg") == 512 * MB


def test_no_cgroup_file_no_limit(tmp_path: Path) -> None:
    assert cgroup_limit(tmp_path / "missing", tmp_path) is None
    _tree(tmp_path, {"proc": "4:memory:/\n", "cg/memory/memory.limit_in_bytes": "9223372036854771712"})
    assert cgroup_limit(tmp_path / "proc", tmp_path / "cg") is None


def test_cpu_quota_v1_and_v2(tmp_path: Path) -> None:
    _tree(tmp_path, {
        "v1/proc": "3:cpu,cpuacct:/libpod_parent/abc\n",
        "v1/cg/cpu,cpuacct/cpu.cfs_quota_us": "150000\n",
        "v1/cg/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        "v2/proc": "0::/box\n",
        "v2/cg/cgroup.controllers": "cpu memory\n",
        "v2/cg/box/cpu.max": "200000 100000\n",
        "none/proc": "3:cpu,cpuacct:/\n",
        "none/cg/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
        "none/cg/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
    })
    assert cpu_limit(tmp_path / "v1/proc", tmp_path / "v1/cg") == 2  # 1.5 CPUs: rounded up
    assert cpu_limit(tmp_path / "v2/proc", tmp_path / "v2/cg") == 2
    assert cpu_limit(tmp_path / "none/proc", tmp_path / "none/cg") is None


def test_budget_leaves_a_fifth_and_at_least_64_mb() -> None:
    assert budget_for(None) is None
    assert budget_for(512 * MB) == 512 * MB - 512 * MB // 5
    assert budget_for(256 * MB) == 192 * MB


def test_config_budget_flag_and_limits() -> None:
    assert Config(memory_budget=0).memory_budget_bytes is None
    config = Config(memory_budget=460)
    assert config.memory_budget_bytes == 460 * MB and config.limits["memory_budget_mb"] == 460
    with pytest.raises(ValueError, match="memory-budget"):
        Config(memory_budget=10)


# plan(budget, used, resident, needed, run, least, fresh): Kokoro-like numbers (MB).
KOKORO_ZH = {"kokoro": 140.0, "kokoro:zh": 126.0}


def test_what_fits_runs_unbounded() -> None:
    assert plan(1000, 400, KOKORO_ZH, KOKORO_ZH, 500, 60, 90) == Plan(True)


def test_a_run_is_shortened_before_anything_is_unloaded() -> None:
    assert plan(460, 360, KOKORO_ZH, KOKORO_ZH, 500, 60, 90) == Plan(True, run_mb=100)


def test_a_restart_makes_room_for_the_jobs_parts() -> None:
    # zh and ja front ends and Kokoro resident; a Japanese job needs Kokoro and ja only.
    resident = {**KOKORO_ZH, "kokoro:ja": 80.0}
    got = plan(460, 445, resident, {"kokoro": 140.0, "kokoro:ja": 80.0}, 500, 60, 90)
    assert got == Plan(True, restart=True, run_mb=460 - 90 - 220)


def test_a_voice_that_cannot_fit_alone_is_refused_whatever_is_loaded() -> None:
    assert plan(400, 100, {}, KOKORO_ZH, 500, 60, 90) == Plan(False)
    assert plan(400, 380, KOKORO_ZH, KOKORO_ZH, 500, 60, 90) == Plan(False)


def test_no_restart_when_it_would_give_back_next_to_nothing() -> None:
    # Only the job's own parts are resident and the leftovers are small: the shortest run.
    used = 90 + 266 + 5
    assert plan(400, used, KOKORO_ZH, KOKORO_ZH, 500, 40, 90) == Plan(True, run_mb=40)


def test_own_rss_and_anonymous_memory_read_this_process() -> None:
    assert memory.own_rss() > memory.anonymous_bytes() > 10 * MB
