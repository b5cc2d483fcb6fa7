"""The memory budget's decisions and the cgroup limit it defaults to (rtts/host/memory.py).

The same behaviour runs end to end, with real voices under a real budget, in
tests/live/test_memory_budget.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rtts.config import Config
from rtts.host import memory
from rtts.host.cgroup import cpu_limit
from rtts.host.cgroup import memory_limit as cgroup_limit
from rtts.host.memory import MB, Plan, budget_for, plan

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


def test_a_non_ascii_cgroup_path_is_found_as_it_is(tmp_path: Path) -> None:
    """Issue 30, bug 4: ``0::/kiosk-café`` raised UnicodeDecodeError (not an OSError) while
    the config was built, and ``serve`` did not start. A path is bytes, not always UTF-8."""
    (tmp_path / "proc").write_bytes("0::/kiosk-café\n".encode())
    _tree(tmp_path, {"cg/cgroup.controllers": "cpu memory\n", "cg/kiosk-café/memory.max": str(512 * MB),
                     "cg/kiosk-café/cpu.max": "150000 100000\n"})
    assert cgroup_limit(tmp_path / "proc", tmp_path / "cg") == 512 * MB
    assert cpu_limit(tmp_path / "proc", tmp_path / "cg") == 2
    latin1 = tmp_path / "latin1"
    (latin1 / "proc").parent.mkdir()
    (latin1 / "proc").write_bytes(b"0::/kiosk-caf\xe9\n")  # not UTF-8: the name's bytes all the same
    (latin1 / "cg" / os.fsdecode(b"kiosk-caf\xe9")).mkdir(parents=True)
    (latin1 / "cg/cgroup.controllers").write_text("memory\n")
    (latin1 / "cg" / os.fsdecode(b"kiosk-caf\xe9") / "memory.max").write_text(str(300 * MB))
    assert cgroup_limit(latin1 / "proc", latin1 / "cg") == 300 * MB


def test_garbage_in_the_cgroup_files_is_no_limit(tmp_path: Path) -> None:
    """Bug 4: ``cpu.max`` of ``100000 0`` raised ZeroDivisionError; garbage, ValueError."""
    for n, (cpu_max, memory_max) in enumerate((
        ("100000 0\n", "0\n"), ("abc 100000\n", "lots\n"), ("-5 100000\n", "-1\n"), ("100000\n", "\xe9\n"),
        ("0 100000\n", "\n"),
    )):
        _tree(tmp_path / str(n), {"proc": "0::/box\n", "cg/cgroup.controllers": "cpu memory\n",
                                  "cg/box/cpu.max": cpu_max, "cg/box/memory.max": memory_max})
        assert cpu_limit(tmp_path / str(n) / "proc", tmp_path / str(n) / "cg") is None, cpu_max
        assert cgroup_limit(tmp_path / str(n) / "proc", tmp_path / str(n) / "cg") is None, memory_max
    _tree(tmp_path / "v1", {"proc": "3:cpu,cpuacct:/\n", "cg/cpu,cpuacct/cpu.cfs_quota_us": "150000\n",
                            "cg/cpu,cpuacct/cpu.cfs_period_us": "0\n"})
    assert cpu_limit(tmp_path / "v1/proc", tmp_path / "v1/cg") is None
    (tmp_path / "v1/cg/cpu,cpuacct/cpu.cfs_period_us").write_text("soon\n")
    assert cpu_limit(tmp_path / "v1/proc", tmp_path / "v1/cg") is None


def test_a_cap_too_small_for_rtts_gives_the_smallest_budget_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Bug 4: a cap of 64 MiB or less gave a budget of 0 (no budget at all); 64-128 MiB one
    under 64, which the config then refused as a --memory-budget nobody gave."""
    for cap in (16 * MB, 64 * MB, 100 * MB, 127 * MB):
        caplog.clear()
        with caplog.at_level("WARNING", logger="rtts.host.memory"):
            assert budget_for(cap) == memory.MIN_BUDGET
        assert "below what rtts needs" in caplog.text and "raise the cap" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="rtts.host.memory"):
        assert budget_for(128 * MB) == 64 * MB
    assert caplog.text == ""


@pytest.mark.parametrize("proc, files, budget_mb, threads", [
    ("0::/kiosk-café\n", {"kiosk-café/memory.max": str(512 * MB)}, 512 - 512 / 5, None),
    ("0::/box\n", {"box/memory.max": str(100 * MB), "box/cpu.max": "100000 0\n"}, 64, None),
    ("0::/box\n", {"box/memory.max": str(32 * MB), "box/cpu.max": "50000 100000\n"}, 64, 1),
])
def test_the_config_is_built_under_any_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proc: str, files: dict[str, str], budget_mb: float,
    threads: int | None,
) -> None:
    """Bug 4 end to end: the config ``serve`` builds, its defaults read from these cgroup files."""
    import functools

    from rtts.host import cgroup

    (tmp_path / "proc").write_bytes(proc.encode())
    _tree(tmp_path / "cg", {"cgroup.controllers": "cpu memory\n", **files})
    for name in ("memory_limit", "cpu_limit"):
        monkeypatch.setattr(cgroup, name, functools.partial(getattr(cgroup, name), tmp_path / "proc", tmp_path / "cg"))
    config = Config()
    assert config.memory_budget == pytest.approx(budget_mb)
    if threads is not None:
        assert config.threads == threads


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


def test_bodies_the_server_holds_for_clients_never_make_a_voice_not_fit(tmp_path: Path) -> None:
    # Issue 30: the server's anonymous memory counted whole response bodies (non-streamed
    # captioned JSON), so while eight of them were buffered every voice "did not fit even
    # alone" and every client, theirs included, was refused mid-utterance. The budget counts
    # the server at its own memory; what admitted bodies are still to take counts as taken.
    from rtts.engines.registry import KINDS
    from rtts.engines.voices import VoiceRegistry
    from rtts.synthesis.inference import InferenceWorker
    from tests.unit.test_engine_seam import ToyKind

    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, ToyKind()))
    voice = registry.get("toy/a")
    measured = [250 * MB]  # the server's anonymous memory
    bodies = memory.WholeBodies(300 * MB)

    def worker(**counts) -> InferenceWorker:  # type: ignore[no-untyped-def]
        return InferenceWorker(registry, lambda callback: callback(), host=registry.host, budget_bytes=200 * MB,
                               **counts)

    held = bodies.reserve(200 * MB)
    assert held is not None
    held.fill(200 * MB)
    before = worker(server_rss=lambda: measured[0])  # as it was: the bodies counted as the server's own
    assert before._plan(voice, "en") == Plan(False)
    now = worker(server_rss=lambda: bodies.server_own(measured[0]), server_pending=bodies.pending)
    assert now._plan(voice, "en") == Plan(True)
    # Admitted and not yet made: the room it will take is counted before it is taken, so
    # the run is made to fit (here by a restart), never refused.
    held.release()
    measured[0] = 60 * MB
    assert bodies.reserve(150 * MB) is not None
    fit = now._plan(voice, "en")
    assert fit is not None and fit.fits and fit.restart


def test_an_engine_that_says_its_own_memory_is_planned_by_it(tmp_path: Path) -> None:
    # Issue 31: Kokoro with its distilled generator holds 101 MB where the teacher holds 121,
    # and its runs add a tenth as much; planned by the kind's (the teacher's) figures, a
    # 384 MB box refused Japanese "even alone". An engine's own ``memory`` is what counts.
    from rtts.engines.base import Costs, Memory
    from rtts.engines.registry import KINDS
    from rtts.engines.voices import VoiceRegistry
    from rtts.synthesis.inference import InferenceWorker
    from tests.unit.test_engine_seam import ToyKind

    class HeavyKind(ToyKind):  # the kind's priors: too big for the budget even alone
        costs = Costs(rtf=0.01, load_s=0.1, first_s_per_char=0.001,
                      memory=Memory(model_mb=150, run_mb=300, min_run_mb=60))

    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, HeavyKind()))
    voice = registry.get("toy/a")
    worker = InferenceWorker(registry, lambda callback: callback(), host=registry.host, budget_bytes=200 * MB,
                             server_rss=lambda: 0)
    assert worker._plan(voice, "en") == Plan(False)
    engine = registry.engines[voice.model]
    engine.memory = Memory(model_mb=90, run_mb=100, min_run_mb=30)  # type: ignore[attr-defined]
    fit = worker._plan(voice, "en")
    assert fit is not None and fit.fits


def test_a_generator_a_request_names_is_counted_before_it_opens(tmp_path: Path) -> None:
    # Issue 31: a request may name the Kokoro generator the load did not open (the teacher's
    # decoder beside the student's graph: +75 MB); the budget counts it as a part of its
    # own before the run, and its runs by that generator's figures (``run_memory``).
    from rtts.engines.base import Costs, Memory
    from rtts.engines.registry import KINDS
    from rtts.engines.voices import VoiceRegistry
    from rtts.synthesis.inference import InferenceWorker
    from tests.unit.test_engine_seam import ToyKind

    class ChoiceKind(ToyKind):
        costs = Costs(rtf=0.01, load_s=0.1, first_s_per_char=0.001, memory=Memory(model_mb=90, run_mb=40, min_run_mb=30))

    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, ChoiceKind()))
    voice = registry.get("toy/a")
    engine = registry.engines[voice.model]
    engine.generator_part = lambda lang, generator: ("teacher", 80.0) if generator == "teacher" else None  # type: ignore[attr-defined]
    engine.run_memory = lambda lang, generator: (700.0, 60.0) if generator == "teacher" else (40.0, 30.0)  # type: ignore[attr-defined]
    worker = InferenceWorker(registry, lambda callback: callback(), host=registry.host, budget_bytes=200 * MB,
                             server_rss=lambda: 0)
    assert worker._plan(voice, "en") == Plan(True)
    assert worker._plan(voice, "en", generator="student") == Plan(True)
    assert worker._needed_mb(voice, "en", "teacher") == {voice.model: 90, f"{voice.model}:teacher": 80.0}
    # 20 (a fresh process) + 90 + 80 leaves 10 MB: less than the teacher's least run of 60.
    assert worker._plan(voice, "en", generator="teacher") == Plan(False)


def test_an_unbounded_run_that_grows_with_its_unit_is_planned_by_its_unit(tmp_path: Path) -> None:
    # Hibari's model runs a unit whole (no bound) and its run grows with the unit: +15 MB
    # for a 60-character sentence, +87 for the longest unit. Planned at the longest for
    # every unit, an English sentence after a Japanese one on a 384 MB box restarted the
    # inference process for room it would never use.
    from rtts.engines.base import Costs, Memory
    from rtts.engines.registry import KINDS
    from rtts.engines.voices import VoiceRegistry
    from rtts.synthesis.inference import InferenceWorker
    from tests.unit.test_engine_seam import ToyKind

    class GrowingKind(ToyKind):
        first_unit_chars = 40
        costs = Costs(rtf=0.01, load_s=0.1, first_s_per_char=0.001,
                      memory=Memory(model_mb=50, run_mb=90, unit_base_mb=12, unit_mb_per_char=0.25))

    assert GrowingKind.costs.memory.unit_run_mb(60) == 27.0
    assert GrowingKind.costs.memory.unit_run_mb(1000) == 90  # never above the longest unit's
    assert Memory(run_mb=90).unit_run_mb(60) == 90  # not given: every run at the longest

    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, GrowingKind()))
    voice = registry.get("toy/a")
    server, held = [40 * MB], [60 * MB]  # the server's own, and what it holds besides

    def worker() -> InferenceWorker:
        return InferenceWorker(registry, lambda callback: callback(), host=registry.host, budget_bytes=200 * MB,
                               server_rss=lambda: server[0], server_pending=lambda: held[0])

    # 200 - 100 held - the model's 50 leaves 50 MB; a new process would leave 90.
    assert worker()._plan(voice, "en", chars=60) == Plan(True)  # 27 MB: as things are
    fit = worker()._plan(voice, "en", chars=250)  # 74.5 MB: only in a new process
    assert fit is not None and fit.fits and fit.restart
    assert worker()._plan(voice, "en", preload=True) == Plan(True)  # its first unit, 40 characters: 22 MB
    server[0] = 100 * MB  # a new process would leave 30: a sentence, never the longest unit
    held[0] = 0
    assert worker()._plan(voice, "en", chars=60) == Plan(True)
    assert worker()._plan(voice, "en", chars=250) == Plan(False)
