"""Piper and Hibari time their words (issue 23), with the real voices: through the
engine seam (``synthesize(..., words=True)``) and over the WebSocket.

Both draw noise (Piper in its graph, Hibari in its DSP), so where audio is compared bit
for bit the noise is fixed: Piper's scales at zero, Hibari's generator seeded.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtts import protocol
from rtts.engines.base import Spoken, Timing, VoiceInfo
from rtts.engines.hibari import HIBARI, HibariEngine, HibariWork
from rtts.engines.hibari_timed import cached_timed
from rtts.engines.piper import PiperEngine, phoneme_ids
from rtts.engines.vits_split import SplitError
from rtts.engines.voices import VoiceRegistry
from rtts.host.client import Host
from rtts.text.lexicon import PHONEMES_CLOSE, PHONEMES_OPEN
from tests.conftest import Client
from tests.texts import LONG_TEXT

PIPER = "piper/en_US-joe-medium"
TEXT = "On March 3rd, 2026, Dr. Smith paid $23.50 for the tickets. Then he went home, quite happy."
# One sentence of some 300 phonemes: one piece, decoded in many windows or in one or two.
LONG_SENTENCE = LONG_TEXT[: LONG_TEXT.index(". ") + 1]
_WRITTEN = re.compile(r"\S*\w\S*")


@pytest.fixture(scope="module")
def registry(models_cache: Path) -> VoiceRegistry:
    return VoiceRegistry.discover(None, models_cache, threads=2)


def _quiet_piper(registry: VoiceRegistry, cache: Path) -> tuple[PiperEngine, VoiceInfo]:
    """joe-medium without its noise: it says a text the same way every time."""
    voice = registry.get(PIPER)
    base = registry.engine_for(voice)
    assert isinstance(base, PiperEngine)
    config = replace(base.config, noise_scale=0.0, noise_w=0.0)
    return PiperEngine(base.key, base.model_path, config, 2, cache, Host()), voice


@pytest.fixture(scope="module")
def piper(registry: VoiceRegistry, models_cache: Path) -> Iterator[tuple[PiperEngine, VoiceInfo]]:
    engine, voice = _quiet_piper(registry, models_cache)
    yield engine, voice
    engine.unload()


def speak(engine: Any, voice: VoiceInfo, text: str, lead_s: float = 0.0, words: bool = True):  # type: ignore[no-untyped-def]
    """The audio, its chunks' sizes, and each timed item with its start and end in the audio."""
    chunks: list[np.ndarray] = []
    items: list[tuple[Spoken, int, int]] = []
    at = 0
    for out in engine.synthesize(text, voice, "en", 1.0, lead_s, words=words):
        if isinstance(out, Timing):
            items.extend((s, at + s.start, at + s.end) for s in out.spoken)
        else:
            chunks.append(out)
            at += out.size
    audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    return audio, [c.size for c in chunks], items


def check_words(text: str, items: list[tuple[Spoken, int, int]], audio_size: int, rate: int) -> None:
    """Every written word has an item, the items are in order, within the audio, and the
    last ends with it."""
    assert items
    for m in _WRITTEN.finditer(text):
        assert any(s.text_start < m.end() and m.start() < s.text_end for s, _, _ in items), m.group(0)
    spans = [(s.text_start, s.text_end) for s, _, _ in items]
    assert spans == sorted(spans)
    starts, ends = [a for _, a, _ in items], [b for _, _, b in items]
    assert starts == sorted(starts) and ends == sorted(ends)
    assert all(0 <= a <= b <= audio_size for _, a, b in items)
    assert audio_size - ends[-1] <= 0.1 * rate, (audio_size - ends[-1]) / rate  # measured: 8-20 ms
    assert starts[0] <= 0.1 * rate  # the leading silence was trimmed


def test_piper_words_cover_the_text_within_its_audio(piper: tuple[PiperEngine, VoiceInfo]) -> None:
    engine, voice = piper
    audio, sizes, items = speak(engine, voice, TEXT)
    check_words(TEXT, items, audio.size, engine.sample_rate)
    said = [s.said for s, _, _ in items]
    assert said[said.index("paid") + 1 : said.index("for")] == ["twenty-three", "dollars", "and", "fifty", "cents"]
    assert all(TEXT[s.text_start : s.text_end] == "$23.50" for s, _, _ in items if s.said in ("dollars", "cents"))


_TEXTS = [
    TEXT,
    LONG_SENTENCE,
    f"Say {PHONEMES_OPEN}həlˈO{PHONEMES_CLOSE} to {PHONEMES_OPEN}ðə wˈɜːld{PHONEMES_CLOSE}, twice!",
    "It's 40-60°C at 7:30 pm on 2026-03-15, isn't it?",
]


@pytest.mark.parametrize("text", _TEXTS)
def test_the_words_are_found_in_the_phonemes_spoken_as_before(
    piper: tuple[PiperEngine, VoiceInfo], hibari: tuple[HibariEngine, VoiceInfo], text: str
) -> None:
    for engine in (piper[0], hibari[0]):
        phonemes, words = engine.phonemize_words(text)
        assert phonemes == engine.phonemize(text)  # timing changes nothing that is said
        spans = [(w.start, w.end) for w in words]
        assert spans == sorted(spans) and all(0 <= a <= b <= len(phonemes) for a, b in spans)
        for m in _WRITTEN.finditer(text):
            assert any(w.text_start < m.end() and m.start() < w.text_end for w in words), (engine.key, m.group(0))
        entries = [w for w in words if text[w.text_start] == PHONEMES_OPEN]
        if PHONEMES_OPEN in text:  # a lexicon entry's phonemes are one word, sentinels and all
            assert [text[w.text_start + 1 : w.text_end - 1] for w in entries] == ["həlˈO", "ðə wˈɜːld"]
            assert [phonemes[w.start : w.end] for w in entries] == ["həlˈO", "ðə wˈɜːld"]


def test_piper_durations_come_from_its_encoder(piper: tuple[PiperEngine, VoiceInfo]) -> None:
    engine, _ = piper
    engine.load()
    ids = phoneme_ids(engine.phonemize(TEXT), engine.config)
    z_p, _, durations = engine.prior(ids, None, 1.0)
    assert durations is not None and durations.shape == (1, 1, len(ids))
    assert int(durations.sum()) == z_p.shape[-1] and durations.min() >= 1  # frames, rounded up
    _, slower = engine._encode(ids, None, 0.5)  # half the speed: about twice the frames (each rounded up)
    assert slower is not None and 1.6 < slower.sum() / durations.sum() < 2.1


def test_piper_audio_is_the_same_with_and_without_words(piper: tuple[PiperEngine, VoiceInfo]) -> None:
    engine, voice = piper
    # Audio in hand: the windows are as large as they go, the same in both runs.
    plain, _, none = speak(engine, voice, TEXT, lead_s=1e6, words=False)
    timed, _, items = speak(engine, voice, TEXT, lead_s=1e6)
    assert not none and items
    assert np.array_equal(plain, timed)


def test_piper_timing_is_the_same_in_small_windows_and_large(piper: tuple[PiperEngine, VoiceInfo]) -> None:
    engine, voice = piper
    small_audio, small, small_items = speak(engine, voice, LONG_SENTENCE, lead_s=0.0)
    large_audio, large, large_items = speak(engine, voice, LONG_SENTENCE, lead_s=1e6)
    assert len(small) > len(large) and len(small) >= 4
    check_words(LONG_SENTENCE, small_items, small_audio.size, engine.sample_rate)
    check_words(LONG_SENTENCE, large_items, large_audio.size, engine.sample_rate)
    assert [s.said for s, _, _ in small_items] == [s.said for s, _, _ in large_items]
    # The same durations: only where the leading silence was cut may differ (the first
    # word may start in it, the last is held to each run's own end).
    shifts = {a - b for (_, a, _), (_, b, _) in zip(small_items[1:-1], large_items[1:-1], strict=True)}
    assert len(shifts) == 1, shifts


def test_a_piper_voice_run_whole_shares_its_audio_by_phoneme(
    registry: VoiceRegistry, models_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cannot_cut(self: PiperEngine) -> None:
        raise SplitError("as a voice that cannot be cut")

    monkeypatch.setattr(PiperEngine, "_load_split", cannot_cut)
    engine, voice = _quiet_piper(registry, models_cache)
    try:
        audio, sizes, items = speak(engine, voice, TEXT)
        assert not engine.streaming and len(sizes) == 2  # one chunk per sentence
        check_words(TEXT, items, audio.size, engine.sample_rate)
        plain, _, _ = speak(engine, voice, TEXT, words=False)
        assert np.array_equal(plain, audio)
    finally:
        engine.unload()


# ---------------------------------------------------------------- Hibari


@pytest.fixture(scope="module")
def hibari(registry: VoiceRegistry) -> tuple[HibariEngine, VoiceInfo]:
    voice = registry.get("hibari/heart")
    engine = registry.engine_for(voice)
    assert isinstance(engine, HibariEngine)
    return engine, voice


def test_hibari_words_cover_the_text_within_its_audio(hibari: tuple[HibariEngine, VoiceInfo]) -> None:
    engine, voice = hibari
    for text in (TEXT, LONG_TEXT):
        audio, sizes, items = speak(engine, voice, text)
        assert len(sizes) > 3  # in windows
        check_words(text, items, audio.size, engine.sample_rate)
    said = [s.said for s, _, _ in items]
    assert said[:4] == ["It", "was", "the", "best"]


class _InProcess:
    """Hibari's ops run in this process, as the inference process runs them, so that the
    test can seed their noise (the engine's own host is tested above and over the wire)."""

    running = True

    def __init__(self) -> None:
        self.work = HibariWork()

    def call(self, op: str, *args: Any) -> Any:
        return getattr(self.work, HIBARI.host_ops[op].rsplit(".", 1)[1])(*args)

    def release(self) -> None:
        self.work.unload()


def test_hibari_audio_is_the_same_with_and_without_words(
    hibari: tuple[HibariEngine, VoiceInfo], models_cache: Path
) -> None:
    _, voice = hibari
    host = _InProcess()
    engine = HibariEngine(hibari[0].model, 2, models_cache, host)  # type: ignore[arg-type]
    try:
        host.work.rng = np.random.default_rng(23)
        plain, plain_sizes, none = speak(engine, voice, TEXT, words=False)
        host.work.rng = np.random.default_rng(23)
        timed, sizes, items = speak(engine, voice, TEXT)
        assert not none and items and sizes == plain_sizes
        assert np.array_equal(plain, timed)
    finally:
        engine.unload()


def test_hibari_timed_model_makes_the_same_spectra(hibari: tuple[HibariEngine, VoiceInfo], models_cache: Path) -> None:
    import onnxruntime as ort

    model = hibari[0].model
    timed, meta = cached_timed(model, models_cache)
    ids = np.asarray([[0, *range(16, 60), 0]], np.int64)
    feeds = {"ids": ids, "speed": np.asarray([1.1], np.float32)}
    plain = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)
    out = ort.InferenceSession(str(timed), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert len(out) == len(plain) + 1 and meta["outputs"] == len(out)
    assert all(np.array_equal(a, b) for a, b in zip(plain, out[: len(plain)], strict=True))
    durations = out[-1]
    assert durations.shape == (ids.shape[1],) and durations.min() >= 1
    assert out[0].shape[-1] == 2 * int(durations.sum())  # the frames, upsampled twice


# ---------------------------------------------------------------- over the WebSocket


@pytest.mark.parametrize("voice", [PIPER, None], ids=["piper", "hibari-default"])
def test_words_over_the_websocket(client: Client, voice: str | None) -> None:
    msg: dict[str, Any] = {"type": "speak", "id": "w1", "text": TEXT, "words": True}
    if voice is not None:
        msg["voice"] = voice
    client.send(**msg)
    entries: list[dict[str, Any]] = []
    heard = 0  # the pts where the audio received so far ends
    started = None
    frame = 24000 * 20 // 1000
    for m in client.utterance("w1"):
        if isinstance(m, protocol.Start):
            started = m
        elif isinstance(m, protocol.Words):
            for e in m.words:  # before the audio it describes
                assert e["start"] >= heard - frame, (e, heard)
            entries.extend(m.words)
        elif isinstance(m, protocol.Audio):
            heard = max(heard, m.pts + len(m.data) // 2)
    assert started is not None and started.voice == (voice or "hibari/heart")
    # Every written word once, in order, with the client's own text.
    written = [(a, b) for a, b in ((m.start(), m.end()) for m in _WRITTEN.finditer(TEXT))]
    assert len(entries) == len(written)
    for e, (a, b) in zip(entries, written, strict=True):
        assert a <= e["text_start"] < e["text_end"] <= b and e["text"] == TEXT[e["text_start"] : e["text_end"]]
    assert [e["text"] for e in entries][6:8] == ["paid", "$23.50"]
    assert entries[7]["said"] == "twenty-three dollars and fifty cents"
    starts, ends = [e["start"] for e in entries], [e["end"] for e in entries]
    assert starts == sorted(starts) and ends == sorted(ends)
    assert all(e["start"] < e["end"] for e in entries)
    assert 0 <= starts[0] and ends[-1] <= heard and heard - ends[-1] < 0.15 * 24000
