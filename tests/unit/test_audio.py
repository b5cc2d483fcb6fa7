"""Pure tests for rtts.sound.audio."""

from __future__ import annotations

import io
import struct
import warnings
import wave
from pathlib import Path

import numpy as np
import pytest
import soxr
from hypothesis import given
from hypothesis import strategies as st

from rtts.sound import audio
from rtts.sound.audio import FORMATS, SAMPLE_RATES, Framer, Resampler

ALL_INT16 = np.arange(-32768, 32768, dtype=np.int16)


def sine(freq: float, rate: int, seconds: float, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(round(rate * seconds)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def pieces(x: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    bounds = np.cumsum([0, *sizes])
    out = [x[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True) if a < len(x)]
    return [*out, x[bounds[-1] :]]


# --- formats ----------------------------------------------------------------


def test_constants() -> None:
    assert FORMATS == ("pcm16", "f32", "mulaw")
    assert SAMPLE_RATES == (8000, 16000, 22050, 24000, 44100, 48000)
    assert [audio.bytes_per_sample(f) for f in FORMATS] == [2, 4, 1]


@pytest.mark.parametrize("call", [lambda: audio.bytes_per_sample("wav"), lambda: audio.encode([0.0], "s16")])
def test_unknown_format(call: object) -> None:
    with pytest.raises(ValueError, match="unknown audio format"):
        call()  # type: ignore[operator]


def test_pcm16_rounds_clips_and_is_little_endian() -> None:
    x = [0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -7.0, 1.6 / 32768, -1.6 / 32768]
    data = audio.encode(x, "pcm16")
    assert struct.unpack("<9h", data) == (0, 16384, -16384, 32767, -32768, 32767, -32768, 2, -2)


def test_pcm16_decode_encode_is_lossless() -> None:
    data = ALL_INT16.astype("<i2").tobytes()
    x = audio.decode(data, "pcm16")
    assert x.dtype == np.float32 and x.min() == -1.0 and x.max() < 1.0
    assert audio.encode(x, "pcm16") == data


def test_f32_round_trip_little_endian() -> None:
    x = np.array([0.0, 0.25, -1.0, 1.0, 3.0], dtype=np.float32)
    data = audio.encode(x, "f32")
    assert struct.unpack("<5f", data) == (0.0, 0.25, -1.0, 1.0, 1.0)
    y = audio.decode(data, "f32")
    assert y.dtype == np.float32 and y.flags.writeable
    np.testing.assert_array_equal(y, [0.0, 0.25, -1.0, 1.0, 1.0])


def _audioop():  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop
    return audioop


def test_mulaw_matches_audioop_on_every_int16() -> None:
    pcm = ALL_INT16.astype("<i2").tobytes()
    assert audio.encode(audio.decode(pcm, "pcm16"), "mulaw") == _audioop().lin2ulaw(pcm, 2)


def test_mulaw_decode_matches_audioop_on_every_byte() -> None:
    every = bytes(range(256))
    expected = audio.decode(_audioop().ulaw2lin(every, 2), "pcm16")
    np.testing.assert_array_equal(audio.decode(every, "mulaw"), expected)


def test_mulaw_round_trip_is_close() -> None:
    x = sine(440, 8000, 0.1)
    y = audio.decode(audio.encode(x, "mulaw"), "mulaw")
    assert np.abs(x - y).max() < 0.02  # mu-law keeps about 14 bits near zero, 6 near full scale


@pytest.mark.parametrize("fmt", FORMATS)
def test_encode_tolerates_nan(fmt: str) -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.5], dtype=np.float32)
    y = audio.decode(audio.encode(x, fmt), fmt)
    np.testing.assert_allclose(y, [0.0, 1.0, -1.0, 0.5], atol=0.02)


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty(fmt: str) -> None:
    assert audio.encode(np.zeros(0, np.float32), fmt) == b""
    assert audio.decode(b"", fmt).shape == (0,)


@pytest.mark.parametrize(("fmt", "size"), [("pcm16", 3), ("f32", 6)])
def test_decode_rejects_partial_samples(fmt: str, size: int) -> None:
    with pytest.raises(ValueError, match="whole number"):
        audio.decode(b"\0" * size, fmt)


def test_encode_rejects_multichannel() -> None:
    with pytest.raises(ValueError, match="mono"):
        audio.encode(np.zeros((4, 2), np.float32), "pcm16")


@given(st.lists(st.floats(-1, 1, width=32), max_size=50), st.sampled_from(FORMATS))
def test_encode_decode_property(values: list[float], fmt: str) -> None:
    data = audio.encode(values, fmt)
    assert len(data) == len(values) * audio.bytes_per_sample(fmt)
    y = audio.decode(data, fmt)
    # pcm16: rounding, or 1/32768 where +1.0 clips to 32767; mulaw: its coarse top segment.
    tolerance = {"pcm16": 1 / 32768, "f32": 0.0, "mulaw": 0.02}[fmt]
    assert np.abs(y - np.asarray(values, np.float32)).max(initial=0) <= tolerance


# --- timing -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "ms", "n"), [(24000, 20, 480), (22050, 20, 441), (8000, 2.5, 20), (48000, 10, 480), (16000, 0.0625, 1)]
)
def test_frame_samples(rate: int, ms: float, n: int) -> None:
    assert audio.frame_samples(rate, ms) == n


@pytest.mark.parametrize(("rate", "ms"), [(22050, 10), (44100, 5), (8000, 0.1), (0, 20), (24000, 0)])
def test_frame_samples_rejects_fractional_or_empty_frames(rate: int, ms: float) -> None:
    with pytest.raises(ValueError):
        audio.frame_samples(rate, ms)


@given(st.sampled_from(SAMPLE_RATES), st.integers(1, 200))
def test_frame_samples_holds_exactly_frame_ms(rate: int, ms: int) -> None:
    try:
        n = audio.frame_samples(rate, ms)
    except ValueError:
        assert rate * ms % 1000
    else:
        assert n * 1000 == rate * ms


def test_silence() -> None:
    s = audio.silence(20, 24000)
    assert s.dtype == np.float32 and len(s) == 480 and not s.any()
    assert len(audio.silence(0, 8000)) == 0
    with pytest.raises(ValueError):
        audio.silence(-1, 8000)


# --- resampling -------------------------------------------------------------


def test_resampler_in_pieces_matches_one_shot() -> None:
    x = sine(1000, 22050, 1.0)
    resampler = Resampler(22050, 24000)
    rng = np.random.default_rng(1)
    sizes = list(rng.integers(1, 400, size=200))
    y = np.concatenate([*(resampler.process(p) for p in pieces(x, sizes)), resampler.flush()])
    expected = soxr.resample(x, 22050, 24000, quality="HQ")
    assert abs(len(y) - len(x) * 24000 / 22050) <= 1
    assert len(y) == len(expected)
    np.testing.assert_allclose(y, expected, atol=1e-6)
    # A 1 kHz sine at 0.5 changes by at most 2*pi*1000/24000*0.5 per sample; a seam
    # between pieces would show up as a bigger jump.
    assert np.abs(np.diff(y)).max() <= 1.02 * 2 * np.pi * 1000 / 24000 * 0.5
    assert y.dtype == np.float32


def test_resampler_flush_resets_for_the_next_utterance() -> None:
    x = sine(300, 16000, 0.2)
    resampler = Resampler(16000, 48000)
    first = np.concatenate([resampler.process(x), resampler.flush()])
    second = np.concatenate([resampler.process(x[:1000]), resampler.process(x[1000:]), resampler.flush()])
    np.testing.assert_allclose(first, second, atol=1e-6)
    assert len(first) == 3 * len(x)


def test_resampler_passthrough() -> None:
    x = sine(300, 24000, 0.01)
    resampler = Resampler(24000, 24000)
    assert resampler.passthrough
    assert resampler.process(x) is x
    assert len(resampler.flush()) == 0


def test_resampler_accepts_float64_and_rejects_bad_rates() -> None:
    resampler = Resampler(24000, 8000)
    y = np.concatenate([resampler.process(np.zeros(2400)), resampler.flush()])
    assert y.dtype == np.float32 and len(y) == 800
    with pytest.raises(ValueError):
        Resampler(0, 8000)


@given(st.lists(st.integers(0, 700), max_size=12))
def test_resampler_is_seamless_for_any_chunking(sizes: list[int]) -> None:
    x = sine(440, 24000, 0.2)
    whole = Resampler(24000, 16000)
    expected = np.concatenate([whole.process(x), whole.flush()])
    chunked = Resampler(24000, 16000)
    y = np.concatenate([*(chunked.process(p) for p in pieces(x, sizes)), chunked.flush()])
    np.testing.assert_allclose(y, expected, atol=1e-6)


# --- framing ----------------------------------------------------------------


def test_framer() -> None:
    framer = Framer(4)
    assert framer.push(np.arange(3, dtype=np.float32)) == []
    assert framer.pending == 3 and framer.samples_out == 0
    frames = framer.push(np.arange(3, 10, dtype=np.float32))
    assert [f.tolist() for f in frames] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert framer.samples_out == 8 and framer.pending == 2
    last = framer.flush()
    assert last is not None and last.tolist() == [8, 9]
    assert framer.samples_out == 10
    assert framer.flush() is None


def test_framer_last_frame_is_short() -> None:
    framer = Framer(480)
    assert len(framer.push(np.zeros(1000, np.float32))) == 2
    last = framer.flush()
    assert last is not None and len(last) == 40
    with pytest.raises(ValueError):
        Framer(0)


@given(st.lists(st.integers(0, 50), max_size=20), st.integers(1, 16))
def test_framer_property(sizes: list[int], size: int) -> None:
    x = np.arange(sum(sizes), dtype=np.float32)
    framer = Framer(size)
    out: list[np.ndarray] = []
    for p in pieces(x, sizes):
        pts = framer.samples_out
        frames = framer.push(p)
        assert all(len(f) == size for f in frames)
        if frames:
            assert frames[0][0] == pts  # samples_out is the timestamp of the next frame
        out += frames
    last = framer.flush()
    if last is not None:
        assert 0 < len(last) < size
        out.append(last)
    assert framer.samples_out == len(x)
    np.testing.assert_array_equal(np.concatenate([np.zeros(0, np.float32), *out]), x)


# --- WAV --------------------------------------------------------------------


def test_wav_round_trip_bytes_and_path(tmp_path: Path) -> None:
    x = sine(440, 22050, 0.05)
    data = audio.wav_bytes(x, 22050)
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 22050)
    y, rate = audio.read_wav(data)
    assert rate == 22050 and y.dtype == np.float32
    np.testing.assert_allclose(y, x, atol=1 / 32768)
    path = tmp_path / "x.wav"
    path.write_bytes(data)
    z, _ = audio.read_wav(path)
    np.testing.assert_array_equal(z, y)


def test_read_wav_downmixes_8bit_stereo() -> None:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(1)
        w.setframerate(8000)
        w.writeframes(bytes([128, 128, 255, 129, 0, 128]))
    y, rate = audio.read_wav(buf.getvalue())
    assert rate == 8000
    np.testing.assert_allclose(y, [0.0, 128 / 256, -0.5])


# --- clean-up ---------------------------------------------------------------


def test_sanitize() -> None:
    x = np.array([0.1, np.nan, 2.0, -np.inf, -3.0, np.inf], dtype=np.float32)
    y, bad = audio.sanitize(x)
    assert bad == 3
    np.testing.assert_array_equal(y, np.array([0.1, 0.0, 1.0, 0.0, -1.0, 0.0], dtype=np.float32))
    assert np.isnan(x[1])  # the input is not modified


def test_sanitize_clean_input() -> None:
    x = sine(100, 8000, 0.01)
    y, bad = audio.sanitize(x)
    assert bad == 0 and y.dtype == np.float32
    np.testing.assert_array_equal(y, x)
