"""Kokoro with its Snakes as the native op (rtts/native, rtts/engines/snake.py) against the
same engine with them as graph nodes, through the real inference process, on real
sentences in English, Mandarin and Japanese: the audio must be the same in every sample.
And without a C compiler, Kokoro loads and speaks in the graph form.

The Kokoro model is assembled into .pytest-cache-models/ (kept between runs) unless
RTTS_TEST_CACHE points elsewhere."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rtts.engines.kokoro import KokoroEngine
from rtts.engines.kokoro_cut import cached_kokoro_cut
from rtts.engines.voices import VoiceRegistry

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC") or "cc") is None, reason="no C compiler")

SENTENCES = [
    ("en", "kokoro/af_heart", "The quick brown fox jumps over the lazy dog."),
    ("en", "kokoro/af_heart", "Please stand clear of the closing doors."),
    ("zh", "kokoro/zf_xiaoxiao", "各位旅客请注意，开往上海虹桥的列车现在开始检票。"),
    ("zh", "kokoro/zf_xiaoxiao", "欢迎光临。"),
    ("ja", "kokoro/jf_alpha", "東京駅へようこそ。次の電車は5分後に発車します。"),
]


@pytest.fixture(scope="module")
def cache_dir() -> Path:
    path = Path(os.environ.get("RTTS_TEST_CACHE") or Path(__file__).parents[2] / ".pytest-cache-models")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _loaded(cache_dir: Path, **env: str) -> VoiceRegistry:
    """A registry whose Kokoro engine was loaded with ``env`` set (the library is chosen at load)."""
    registry = VoiceRegistry.discover(None, cache_dir, threads=2)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        registry.engines["kokoro"].load()
    return registry


@pytest.fixture(scope="module")
def forms(cache_dir: Path) -> Iterator[dict[str, VoiceRegistry]]:
    both = {"native": _loaded(cache_dir), "graph": _loaded(cache_dir, RTTS_NATIVE_SNAKE="0")}
    yield both
    for registry in both.values():
        registry.engines["kokoro"].unload()


def _speak(registry: VoiceRegistry, lang: str, voice_id: str, text: str) -> np.ndarray:
    voice = registry.get(voice_id)
    return np.concatenate(list(registry.engine_for(voice).synthesize(text, voice, lang, 1.0)))


def _library(registry: VoiceRegistry) -> Path | None:
    engine = registry.engines["kokoro"]
    assert isinstance(engine, KokoroEngine) and engine._decoder is not None  # runs cut
    return engine._decoder._spec[4]  # the custom-op library its decoder was opened with


def test_native_snakes_give_the_graph_forms_audio_bit_for_bit(forms: dict[str, VoiceRegistry], cache_dir: Path) -> None:
    native, graph = forms["native"], forms["graph"]
    assert _library(native) is not None and _library(graph) is None
    model = native.engines["kokoro"].model_path()
    assert cached_kokoro_cut(model, cache_dir, native_snake=True)[2]["snakes"] == 48
    assert "snakes" not in cached_kokoro_cut(model, cache_dir)[2]
    for lang, voice, text in SENTENCES:
        a, b = _speak(native, lang, voice, text), _speak(graph, lang, voice, text)
        assert a.size == b.size > 12_000, (text, a.size, b.size)
        worst = float(np.max(np.abs(a - b)))
        print(f"{lang} {text!r}: {a.size / 24_000:.2f} s, largest sample difference {worst:g}")
        assert worst == 0.0, text


def test_native_snakes_survive_a_new_inference_process(forms: dict[str, VoiceRegistry]) -> None:
    # The session's spec carries the library, so a decoder loaded again in a new child
    # (the old one died) still has its op.
    native, graph = forms["native"], forms["graph"]
    lang, voice, text = SENTENCES[3]
    before = _speak(native, lang, voice, text)
    host = native.engines["kokoro"]._host
    host._proc.kill()
    host._proc.wait(10)
    after = _speak(native, lang, voice, text)
    assert np.array_equal(before, after) and np.array_equal(after, _speak(graph, lang, voice, text))
    assert _library(native) is not None


def test_without_a_compiler_kokoro_speaks_in_the_graph_form(
    forms: dict[str, VoiceRegistry], cache_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A cache dir with everything but the built library (a library already kept there is
    # used without a compiler: test_snake_native.py), the rest linked, not copied.
    bare_cache = tmp_path / "cache"
    bare_cache.mkdir()
    for entry in cache_dir.iterdir():
        if entry.name != "native":
            (bare_cache / entry.name).symlink_to(entry)
    with caplog.at_level(logging.INFO, logger="rtts.engines.kokoro"):
        bare = _loaded(bare_cache, CC="/nonexistent/cc")
    try:
        assert _library(bare) is None
        assert "Snake activations run as graph nodes: no C compiler (/nonexistent/cc not found)" in caplog.text
        lang, voice, text = SENTENCES[2]
        assert np.array_equal(_speak(bare, lang, voice, text), _speak(forms["native"], lang, voice, text))
    finally:
        bare.engines["kokoro"].unload()


def test_a_library_the_inference_process_cannot_load_falls_back_to_the_graph_form(
    forms: dict[str, VoiceRegistry], cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Past its build's check, a library could still fail in the inference process (the
    # file replaced, another ORT there): the decoder is then opened in the graph form.
    broken = tmp_path / "snake-broken.so"
    broken.write_bytes(b"not a shared object")
    monkeypatch.setattr("rtts.engines.kokoro.snake_library", lambda cache: (broken, "built"))
    registry = VoiceRegistry.discover(None, cache_dir, threads=2)
    with caplog.at_level(logging.WARNING, logger="rtts.engines.kokoro"):
        registry.engines["kokoro"].load()
    try:
        assert _library(registry) is None
        assert "native Snake op did not load" in caplog.text
        lang, voice, text = SENTENCES[3]
        assert np.array_equal(_speak(registry, lang, voice, text), _speak(forms["native"], lang, voice, text))
    finally:
        registry.engines["kokoro"].unload()
