"""rtts.sound.codecs: what is encoded decodes (with FFmpeg's decoders, through PyAV) to the same sound."""

from __future__ import annotations

import io
import os
import threading
import wave

import numpy as np
import pytest

from rtts.sound import audio, codecs

av = pytest.importorskip("av", reason="the codecs extra (PyAV) is part of the test install")

RATE = 24000


def speechlike(seconds: float = 1.5, rate: int = RATE) -> np.ndarray:
    """A few harmonics of a gliding 150-250 Hz pitch with a 4 Hz syllable envelope."""
    t = np.arange(round(rate * seconds)) / rate
    f0 = 150 + 100 * t / seconds
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = 0.5 * (1 - np.cos(2 * np.pi * 4 * t)) * 0.25
    return (voiced * envelope).astype(np.float32)


def as_float(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.int16:
        return x.astype(np.float32) / 32768
    if x.dtype == np.int32:
        return (x / 2**31).astype(np.float32)
    return x.astype(np.float32)


def same_pcm16(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(audio.encode(a, "pcm16"), audio.encode(b, "pcm16")))


def decode_bytes(data: bytes) -> tuple[np.ndarray, int]:
    """All of a container's audio as float32 mono, and its rate."""
    with av.open(io.BytesIO(data)) as f:
        chunks, rate = [], 0
        for frame in f.decode(audio=0):
            chunks.append(as_float(frame.to_ndarray()).reshape(len(frame.layout.channels), -1)[0])
            rate = frame.sample_rate
    return np.concatenate(chunks), rate


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Peak normalized cross-correlation within ±100 ms (codecs add delay)."""
    n = min(len(a), len(b))
    best = 0.0
    for lag in range(-2400, 2401, 4):
        x = a[max(0, lag) : n + min(0, lag)]
        y = b[max(0, -lag) : n - max(0, lag)]
        m = min(len(x), len(y))
        x, y = x[:m], y[:m]
        denom = float(np.linalg.norm(x) * np.linalg.norm(y)) or 1.0
        best = max(best, float(np.dot(x, y)) / denom)
    return best


def encode_in_pieces(fmt: str, x: np.ndarray, piece: int = 480) -> tuple[bytes, int]:
    """Push ``x`` 20 ms at a time, as a live stream does; returns the bytes and how many
    of them came out before ``finish``."""
    enc = codecs.stream_encoder(fmt, RATE)
    out = bytearray()
    for i in range(0, len(x), piece):
        out += enc.push(x[i : i + piece])
    early = len(out)
    out += enc.finish()
    return bytes(out), early


@pytest.mark.parametrize("fmt", codecs.STREAM_FORMATS)
def test_every_stream_format_decodes_to_the_same_sound(fmt: str) -> None:
    x = speechlike()
    data, early = encode_in_pieces(fmt, x)
    assert early > 0, "nothing came out before the end: the body would not stream"
    if fmt == "pcm":
        y, rate = audio.decode(data, "pcm16"), RATE
    else:
        y, rate = decode_bytes(data)
    if rate != RATE:  # Ogg Opus decodes at 48 kHz
        y = audio.Resampler(rate, RATE).process(y)
    # Lossy codecs pad and delay by some ms; the length is the input's within 100 ms.
    assert abs(len(y) - len(x)) < RATE // 10, (len(y), len(x))
    if fmt in ("pcm", "wav", "flac"):
        assert same_pcm16(y[: len(x)], x)
    else:
        assert similarity(x, y) > 0.9


def test_wav_stream_header_says_unknown_length_and_the_wave_module_reads_it() -> None:
    x = speechlike(0.5)
    data, _ = encode_in_pieces("wav", x)
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt "
    assert data[4:8] == b"\xff\xff\xff\xff"
    samples, rate = audio.read_wav(data)
    assert rate == RATE
    assert same_pcm16(samples, x)


def test_a_streamed_wav_says_unknown_as_ffmpeg_does_and_each_reader_takes_all_of_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 30: the data size was 0xFFFFFFFF - 36, a real size to FFmpeg (and 89,478 s to
    Python's wave). Both sizes are now 0xFFFFFFFF, FFmpeg's own "until the data ends"."""
    x = speechlike(0.5)
    data, _ = encode_in_pieces("wav", x)
    assert data[4:8] == data[40:44] == b"\xff\xff\xff\xff"
    saved = tmp_path / "saved.wav"
    saved.write_bytes(data)
    with wave.open(str(saved)) as w:  # wave has no "unknown": it reads every frame that is there
        assert len(w.readframes(w.getnframes())) == 2 * len(x)
    sf = pytest.importorskip("soundfile")
    assert sf.info(str(saved)).frames == len(x)  # libsndfile: the length from the file's size
    read, write = os.pipe()  # FFmpeg reading a stream it cannot seek: no length claimed, every sample
    feeder = threading.Thread(target=lambda: (os.write(write, data), os.close(write)))
    feeder.start()
    with os.fdopen(read, "rb") as pipe, av.open(pipe, format="wav") as f:
        decoded = sum(frame.samples for frame in f.decode(audio=0))
        assert f.duration is None
    feeder.join()
    assert decoded == len(x)


def test_a_wav_of_known_length_says_it() -> None:
    x = speechlike(0.5)
    data = audio.wav_header(RATE, 2 * len(x)) + audio.encode(x, "pcm16")
    with wave.open(io.BytesIO(data)) as w:
        assert w.getnframes() == len(x)
    sf = pytest.importorskip("soundfile")
    assert sf.info(io.BytesIO(data)).frames == len(x)


def test_compressed_formats_are_much_smaller_than_pcm() -> None:
    x = speechlike(3.0)
    pcm = len(audio.encode(x, "pcm16"))
    sizes = {fmt: len(encode_in_pieces(fmt, x)[0]) for fmt in codecs.COMPRESSED}
    assert sizes["opus"] < pcm / 8  # 24 kbit/s against 384
    assert sizes["mp3"] < pcm / 4 and sizes["aac"] < pcm / 4
    assert sizes["flac"] < pcm


def test_an_empty_stream_is_still_a_valid_file() -> None:
    for fmt in ("wav", "flac", "opus"):  # (bare mp3 and ADTS have no header)
        enc = codecs.stream_encoder(fmt, RATE)
        assert enc.finish()[:1]  # a header, at least


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown format"):
        codecs.stream_encoder("ogg-vorbis", RATE)


# ---------------------------------------------------------------- Opus packets


def decode_packets(packets: list[bytes], head: bytes, rate: int) -> np.ndarray:
    """FFmpeg's Opus decoder, as a browser's: it decodes at 48 kHz and drops OpusHead's pre-skip."""
    dec = av.CodecContext.create("libopus", "r")
    dec.extradata = head
    out = []
    for data in packets:
        for frame in dec.decode(av.Packet(data)):
            assert frame.sample_rate == 48000
            out.append(as_float(frame.to_ndarray()).reshape(-1))
    y = np.concatenate(out)
    if rate == 48000:
        return y
    down = audio.Resampler(48000, rate)
    return np.concatenate([down.process(y), down.flush()])


@pytest.mark.parametrize(("rate", "frame_ms"), [(24000, 20), (48000, 20), (16000, 40), (8000, 10), (24000, 60)])
def test_opus_packets_one_per_frame_decode_to_the_input(rate: int, frame_ms: int) -> None:
    x = audio.Resampler(RATE, rate).process(speechlike(1.0)) if rate != RATE else speechlike(1.0)
    x = np.concatenate([x, np.zeros(rate // 100 * 3 + 7, dtype=np.float32)])  # a shorter last frame
    n = audio.frame_samples(rate, frame_ms)
    enc = codecs.OpusPackets(rate, n)
    framer = audio.Framer(n)
    packets = [enc.encode(f) for f in framer.push(x)]
    assert len(packets) == len(x) // n
    packets += enc.finish(framer.flush())
    assert 0 < enc.pre_skip < n
    assert len(packets) == -(-(len(x) + enc.pre_skip) // n)
    assert sum(map(len, packets)) < len(packets) * n * 2 / 4  # far under pcm16's 2 bytes a sample
    y = decode_packets(packets, enc.head, rate)
    # Everything the packets hold but the look-ahead: the input, all of it, then padding.
    assert abs(len(y) - (len(packets) * n - enc.pre_skip)) <= 2
    assert len(y) >= len(x)
    y = y[: len(x)]
    if rate >= 16000:  # 8 kHz is narrowband: the shape survives, the correlation less so
        assert similarity(x, y) > 0.85
    tail = slice(len(x) - 3 * n - rate // 10, len(x) - 3 * n)  # the last 100 ms of sound
    assert np.sqrt(np.mean(y[tail] ** 2)) == pytest.approx(np.sqrt(np.mean(x[tail] ** 2)), rel=0.35)


def test_opus_frames_must_be_whole() -> None:
    enc = codecs.OpusPackets(24000, 480)
    with pytest.raises(ValueError):
        enc.encode(np.zeros(100, dtype=np.float32))


@pytest.mark.parametrize(("rate", "frame_ms"), [(22050, 20), (44100, 20), (24000, 30), (24000, 200)])
def test_check_opus_refuses_what_libopus_cannot_frame(rate: int, frame_ms: int) -> None:
    with pytest.raises(ValueError, match="opus takes"):
        codecs.check_opus(rate, frame_ms)


@pytest.mark.parametrize("fmt", codecs.COMPRESSED)
def test_every_stream_encoder_is_counted_until_closed(fmt: str) -> None:
    """Issue 20, bug 8: a muxer only dropped keeps FFmpeg's buffers; each is counted
    from when it is made until ``finish`` or ``close``, which may come in any order."""
    before = codecs.open_encoders()
    finished, abandoned, empty = (codecs.stream_encoder(fmt, RATE) for _ in range(3))
    assert codecs.open_encoders() == before + 3
    finished.push(speechlike(0.2))
    assert finished.finish()
    finished.close()
    abandoned.push(speechlike(0.2))
    abandoned.close()  # a client gone mid-body
    abandoned.close()
    empty.close()  # a refused request
    assert codecs.open_encoders() == before
    for plain in ("wav", "pcm"):
        codecs.stream_encoder(plain, RATE).close()


def test_available_does_not_import_pyav() -> None:
    """Asked by every WebSocket's ready: importing PyAV there stalled the loop and cost
    ~20 MB on a server that may never encode."""
    import subprocess
    import sys

    code = "import sys; from rtts.sound import codecs; assert codecs.available('opus'); assert 'av' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_opus_rates_a_refusal_names_are_the_ones_offered() -> None:
    """Issue 20: the error for 22,050 Hz listed 12,000 Hz, which hello refuses."""
    from rtts import protocol

    with pytest.raises(ValueError) as info:
        codecs.check_opus(22050, 20, protocol.SAMPLE_RATES)
    listed = [int(r) for r in str(info.value).split("sample_rate ")[1].split(", not")[0].split(", ")]
    assert listed == [r for r in codecs.OPUS_RATES if r in protocol.SAMPLE_RATES] == [8000, 16000, 24000, 48000]
    with pytest.raises(ValueError, match="not 12000"):
        codecs.check_opus(12000, 20, protocol.SAMPLE_RATES)
