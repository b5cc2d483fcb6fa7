"""Kokoro's distilled generator (rtts/engines/kokoro_student.py), the shipped student, real model.

The student replaces only the generator: the teacher's predictor and decode blocks still
run, so a unit's frames (and so its length and its words' places) are the teacher's; only
the waveform differs. These tests load the real Kokoro model and the student rtts ships.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rtts.engines.base import Timing
from rtts.engines.kokoro import LANGS, KokoroEngine
from rtts.engines.kokoro_cut import ENERGY, F0, FEATURES, cached_kokoro_cut
from rtts.engines.kokoro_student import GEN_IN, cached_student_decoder, student_file, student_langs
from rtts.engines.voices import VoiceRegistry
from tests.live.test_engines import cache_dir  # noqa: F401 (the model cache the engine tests share)

pytestmark = [pytest.mark.live, pytest.mark.slow]

MANDARIN = "各位旅客请注意，开往上海的列车即将进站。"


@pytest.fixture(scope="module")
def student(cache_dir: Path):  # type: ignore[no-untyped-def]
    registry = VoiceRegistry.discover(None, cache_dir, threads=2, generator="student")
    voice = registry.get("kokoro/zf_xiaoxiao")
    engine = registry.engine_for(voice)
    yield engine, voice
    engine.unload()
    assert registry.host is not None
    registry.host.stop()


def _speak(engine: KokoroEngine, voice, text: str, lang: str, words: bool = False) -> tuple[np.ndarray, list]:  # type: ignore[no-untyped-def]
    chunks = list(engine.synthesize(text, voice, lang, 1.0, words=words))
    audio = np.concatenate([c for c in chunks if isinstance(c, np.ndarray)])
    return audio, [c for c in chunks if isinstance(c, Timing)]


def test_the_student_ships_and_is_loaded_for_every_language_when_asked(student) -> None:  # type: ignore[no-untyped-def]
    engine, voice = student
    assert student_file() is not None, "models/kokoro-student.onnx is part of rtts"
    assert student_langs("student") == frozenset(LANGS)
    assert student_langs("teacher") == frozenset()
    _speak(engine, voice, "你好。", "zh")
    assert engine.generator == {lang: "student" for lang in LANGS}


def test_the_student_speaks_mandarin_with_the_teachers_timing(student, cache_dir: Path) -> None:  # type: ignore[no-untyped-def]
    engine, voice = student
    audio, timings = _speak(engine, voice, MANDARIN, "zh", words=True)
    assert np.isfinite(audio).all() and audio.size > 24000 * 1.5
    rms = float(np.sqrt(np.mean(audio**2)))
    assert 0.01 < rms < 0.5, rms  # speech, neither silence nor noise at full scale
    # The same unit with the words: the same audio (the noise is seeded per run).
    again, _ = _speak(engine, voice, MANDARIN, "zh")
    np.testing.assert_array_equal(audio, again)
    assert timings and all(t.spoken for t in timings)
    registry = VoiceRegistry.discover(None, cache_dir, threads=2, generator="teacher")
    teacher = registry.engine_for(voice.id)
    try:
        reference, _ = _speak(teacher, voice, MANDARIN, "zh")
        assert teacher.generator["zh"] == "teacher"
    finally:
        teacher.unload()
        assert registry.host is not None
        registry.host.stop()
    # The predictor is the teacher's: the same frames, so lengths agree to the trim's
    # judgement of where the sound starts and ends (a few frames).
    assert abs(audio.size - reference.size) < 0.15 * reference.size


def test_the_join_keeps_the_teachers_decode_blocks(cache_dir: Path) -> None:
    import onnx
    import onnxruntime as ort

    engine = KokoroEngine(cache_dir, threads=2, generator="teacher")
    model = engine.model_path()
    _, decoder_path, _ = cached_kokoro_cut(model, cache_dir)
    joined_path, _ = cached_student_decoder(decoder_path, cache_dir)
    joined = onnx.load(str(joined_path))
    assert [i.name for i in joined.graph.input] == [FEATURES, F0, ENERGY, "style"]
    assert [o.name for o in joined.graph.output] == ["lh", "th", "ln", "lr", "phi"]
    # The generator's input is the teacher's: its nodes are the decoder's, untouched.
    producers = {n.output[0]: n for n in joined.graph.node}
    assert GEN_IN in producers and not producers[GEN_IN].name.startswith("student/")
    rng = np.random.default_rng(0)
    frames = 30
    feeds = {
        FEATURES: rng.standard_normal((1, 512, frames)).astype(np.float32),
        F0: np.full((1, 2 * frames), 180.0, np.float32),
        ENERGY: rng.standard_normal((1, 2 * frames)).astype(np.float32),
        "style": rng.standard_normal((1, 256)).astype(np.float32) * 0.1,
    }
    outputs = ort.InferenceSession(str(joined_path), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert all(o.shape == (1, 601, 2 * frames) and np.isfinite(o).all() for o in outputs)


def test_the_load_opens_the_students_graph_and_not_the_teachers_decoder(cache_dir: Path) -> None:
    """The memory budget takes what a load adds to the inference process as Kokoro's part.
    With the student speaking every language, the load opens its joined graph (inside that
    count) and not the teacher's decoder, which would sit beside it unused: before, the
    first run opened the graph after the count and the decoder stayed, a 384 MB box planned
    for the teacher's size and restarted the process 337 times in 5 minutes
    (docs/history/benchmarks.md)."""
    registry = VoiceRegistry.discover(None, cache_dir, threads=2, generator="student")
    host = registry.host
    assert host is not None
    engine = registry.engine_for("kokoro/zf_xiaoxiao")
    ops: list[str] = []
    opened: list[str] = []
    call, open_ = host.call, host.open

    def recorded_call(op: str, *args):  # type: ignore[no-untyped-def]
        ops.append(op)
        return call(op, *args)

    def recorded_open(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(Path(path).name)
        return open_(path, *args, **kwargs)

    host.call, host.open = recorded_call, recorded_open  # type: ignore[method-assign]
    try:
        engine.load()
        assert "kokoro.student_open" in ops  # the joined graph, opened inside the load
        assert len(opened) == 1 and "predictor" in opened[0], opened  # the teacher's decoder is not
        assert engine.generator["zh"] == "student"
        audio, _ = _speak(engine, registry.get("kokoro/zf_xiaoxiao"), MANDARIN, "zh")
        assert audio.size > 24000 and len(opened) == 1  # it spoke, and opened nothing more
    finally:
        engine.unload()
        host.stop()


def _peak_added(pid: int, speak) -> int:  # type: ignore[no-untyped-def]
    """What ``speak()`` adds to process ``pid``'s resident memory at its peak (VmHWM)."""

    def status(field: str) -> int:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

    with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as f:
        f.write("5")  # the high-water mark back to the current RSS
    before = status("VmRSS")
    speak()
    return status("VmHWM") - before


def test_the_budget_plans_the_student_by_its_own_runs(student) -> None:  # type: ignore[no-untyped-def]
    """Its runs add a tenth of the teacher's memory: planned by the teacher's figures, a
    384 MB box refused Japanese "even alone". Under the same bound the student's runs are
    longer, and a run of the longest the bound allows stays inside it."""
    from rtts.engines.kokoro import KOKORO

    engine, voice = student
    _speak(engine, voice, "你好。", "zh")  # loaded, its first run's arenas made
    assert engine.memory.model_mb < KOKORO.costs.memory.model_mb
    assert engine.memory.min_run_mb < KOKORO.costs.memory.min_run_mb
    bound = 50
    engine.limit_run_memory(bound)
    try:
        tokens = engine.run_tokens("zh", 1.0)
        assert tokens >= 60, tokens  # the teacher's line allows 20 phonemes (~1.3 s) in 50 MB
        text = MANDARIN * 4  # ~150 phonemes: one run of the bound's length, then the rest
        host_pid = engine._host.pid
        assert host_pid is not None
        added = _peak_added(host_pid, lambda: _speak(engine, voice, text, "zh"))
        assert added < bound * 1024 * 1024, added / 2**20
    finally:
        engine.limit_run_memory(None)
