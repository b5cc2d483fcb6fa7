"""Word timing on the HTTP and command-line routes, with real voices: Kokoro-FastAPI's
``POST /dev/captioned_speech`` called as its guide (docs/captions.md) calls it (``requests``,
streamed and whole), ``/tts?captions=vtt|srt`` and ``rtts say --vtt/--srt``.

Every check here can fail: the words must be the client's text, in order, each exactly
once and covering every letter and digit of it; their times must lie inside the audio
that came back, start in order, and (streamed) arrive no later than their audio."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
import requests

from rtts.sound import audio
from tests.conftest import _CACHE, ServerThread, make_config
from tests.live.test_server import PARAGRAPH, fetch, is_speech
from tests.unit.test_subtitles import read_srt, read_vtt

pytestmark = pytest.mark.slow

ENGLISH = "The 10:30 train to Boston costs $23.50. Please mind the gap, and have a good trip!"
MANDARIN = "北京时间2026年3月15日下午三点，列车即将进站。请大家站在黄线以外，注意安全。"
JAPANESE = "次の電車は、十時三十分に三番線から発車いたします。お急ぎください。"
FRAME_S = 0.02


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    with ServerThread(make_config(tmp_path_factory.mktemp("captions"))) as srv:
        yield srv


def done_count(srv: ServerThread) -> float:
    m = re.search(r'^rtts_utterances_total\{reason="done"\} (\S+)$', fetch(srv.http + "/metrics")[2].decode(), re.M)
    return float(m.group(1)) if m else 0.0


def check_words(stamps: list[dict], text: str, audio_s: float) -> None:
    """Kokoro-FastAPI's timestamps as rtts gives them: the client's words, in order, each
    once, covering the text; inside the audio."""
    assert stamps, "no timestamps"
    pos, start = 0, 0.0
    for s in stamps:
        assert s["word"] == text[s["text_start"]:s["text_end"]], s  # the original text, not the normalized
        assert s["text_start"] >= pos, f"{s} overlaps or goes back (at {pos})"
        assert s["word"].strip() and s["said"].strip()
        gap = text[pos:s["text_start"]]
        assert not any(ch.isalnum() for ch in gap), f"{gap!r} is in no word"
        pos = s["text_end"]
        assert start - FRAME_S <= s["start_time"] <= s["end_time"] <= audio_s + FRAME_S, (s, audio_s)
        start = s["start_time"]
    assert not any(ch.isalnum() for ch in text[pos:]), f"{text[pos:]!r} is in no word"


def captioned(srv: ServerThread, **fields) -> requests.Response:  # type: ignore[no-untyped-def]
    return requests.post(f"{srv.http}/dev/captioned_speech", json=fields, stream=bool(fields.get("stream", True)),
                         timeout=300)


def streamed(response: requests.Response) -> tuple[np.ndarray, list[dict], list[float]]:
    """The guide's loop over ``iter_lines``: pcm audio, timestamps, and the seconds of
    audio each timestamp's line came after."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    pcm, stamps, sent_before = b"", [], []
    for line in response.iter_lines(decode_unicode=True):
        if line:
            obj = json.loads(line)
            assert "error" not in obj, obj
            for s in obj["timestamps"]:
                stamps.append(s)
                sent_before.append(len(pcm) / 2 / 24000)
            pcm += base64.b64decode(obj["audio"])
    return audio.decode(pcm, "pcm16"), stamps, sent_before


def test_mandarin_with_no_voice_named_streams_its_words_ahead_of_their_audio(server: ServerThread) -> None:
    samples, stamps, sent_before = streamed(captioned(server, input=MANDARIN, response_format="pcm"))
    seconds = len(samples) / 24000
    is_speech(samples, 24000, " ".join(MANDARIN))  # a character is about a word's length
    check_words(stamps, MANDARIN, seconds)
    # Words come no later than the audio they describe.
    assert all(s["start_time"] >= before - FRAME_S for s, before in zip(stamps, sent_before))


def test_japanese_whole_with_a_bare_kokoro_voice_name(server: ServerThread) -> None:
    r = captioned(server, model="kokoro", input=JAPANESE, voice="jf_alpha", response_format="wav", stream=False)
    assert r.status_code == 200, r.text
    obj = r.json()
    assert obj["audio_format"] == "audio/wav"
    seconds = wav_seconds(base64.b64decode(obj["audio"]))
    check_words(obj["timestamps"], JAPANESE, seconds)
    assert "電車" in [s["word"] for s in obj["timestamps"]]


def test_english_as_kokoro_fastapis_readme_asks_keeps_the_words_as_written(server: ServerThread) -> None:
    av = pytest.importorskip("av", reason="the codecs extra (PyAV) is part of the test install")
    r = captioned(server, model="kokoro", input=ENGLISH, voice="af_bella", speed=1.0, response_format="mp3",
                  stream=False)
    assert r.status_code == 200, r.text
    obj = json.loads(r.content)
    with av.open(io.BytesIO(base64.b64decode(obj["audio"].encode("utf-8")))) as f:
        frames = list(f.decode(audio=0))
    seconds = sum(fr.samples for fr in frames) / frames[0].sample_rate
    check_words(obj["timestamps"], ENGLISH, seconds)
    # A word keeps the punctuation written against it ("$23.50."), never is punctuation alone.
    words = [s["word"].rstrip(".,!?") for s in obj["timestamps"]]
    assert "$23.50" in words and "10:30" in words  # not "twenty-three dollars", not "ten thirty"
    assert all(any(ch.isalnum() for ch in s["word"]) for s in obj["timestamps"])
    said = dict(zip(words, (s["said"] for s in obj["timestamps"])))
    assert "twenty-three dollars" in said["$23.50"].lower() and "thirty" in said["10:30"]


def test_kokoro_fastapis_streaming_example_as_its_readme_has_it(server: ServerThread) -> None:
    av = pytest.importorskip("av", reason="the codecs extra (PyAV) is part of the test install")
    text = "Hello world! Welcome to the captioned speech system."
    response = requests.post(f"{server.http}/dev/captioned_speech", json={
        "model": "kokoro", "input": text, "voice": "af_bella", "speed": 1.0, "response_format": "mp3", "stream": True,
    }, stream=True, timeout=300)
    mp3, stamps = b"", []
    for chunk in response.iter_lines(decode_unicode=True):
        if chunk:
            chunk_json = json.loads(chunk)
            mp3 += base64.b64decode(chunk_json["audio"].encode("utf-8"))
            stamps += chunk_json["timestamps"]
    with av.open(io.BytesIO(mp3)) as f:
        frames = list(f.decode(audio=0))
    seconds = sum(fr.samples for fr in frames) / frames[0].sample_rate
    check_words(stamps, text, seconds)
    assert [s["word"].rstrip("!.") for s in stamps] == text.replace("!", "").replace(".", "").split()


@pytest.mark.parametrize("voice", ["piper/en_US-joe-medium", "hibari/heart"])
def test_english_streamed_with_piper_and_hibari(server: ServerThread, voice: str) -> None:
    samples, stamps, sent_before = streamed(captioned(server, input=ENGLISH, voice=voice, response_format="pcm"))
    check_words(stamps, ENGLISH, len(samples) / 24000)
    assert all(s["start_time"] >= before - FRAME_S for s, before in zip(stamps, sent_before))
    # Each word over speech in the audio it came with (Piper's durations differ run to run).
    for s in stamps:
        part = samples[int(s["start_time"] * 24000):int(s["end_time"] * 24000)]
        assert part.size and float(np.sqrt(np.mean(part**2))) > 0.005, s


def test_without_timestamps(server: ServerThread) -> None:
    samples, stamps, _ = streamed(captioned(server, input=ENGLISH, voice="alloy", response_format="pcm",
                                            return_timestamps=False))
    assert stamps == [] and len(samples) > 24000


def test_the_openai_package_posts_it_and_reads_its_errors(server: ServerThread) -> None:
    """An app built on the ``openai`` package reaches the route with its raw ``post``."""
    client = openai.OpenAI(base_url=server.http, api_key="not-needed", max_retries=0, timeout=300)
    text = "Hello there, friend. The gate closes at 9:45."
    obj = client.post("/dev/captioned_speech", cast_to=object,
                      body={"input": text, "voice": "am_michael", "response_format": "wav", "stream": False})
    assert isinstance(obj, dict)
    check_words(obj["timestamps"], text, wav_seconds(base64.b64decode(obj["audio"])))
    with pytest.raises(openai.BadRequestError) as info:
        client.post("/dev/captioned_speech", cast_to=object, body={"input": text, "voice": "af_bella(2)+af_sky(1)"})
    assert (info.value.code, info.value.param) == ("unknown_voice", "voice")


def test_captioned_refusals(server: ServerThread) -> None:
    r = captioned(server, input=ENGLISH, voice="af_bella+af_sky")
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_voice"
    r = captioned(server, input=ENGLISH, voice="nobody")
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_voice"
    r = captioned(server, input=ENGLISH, lang_code="h")  # Kokoro's Hindi: not offered here
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_language"


# ---------------------------------------------------------------- /tts and rtts say


def wav_seconds(data: bytes) -> float:
    return (len(data) - 44) / 2 / int.from_bytes(data[24:28], "little")


@pytest.mark.parametrize(("fmt", "text", "voice"), [("vtt", ENGLISH, "kokoro/af_heart"), ("srt", MANDARIN, None)])
def test_tts_captions_are_a_subtitle_file_of_the_same_speech(server: ServerThread, fmt: str, text: str,
                                                             voice: str | None) -> None:
    query = {"text": text} | ({"voice": voice} if voice else {})
    status, headers, wav = fetch(f"{server.http}/tts?{urllib.parse.urlencode(query)}")
    assert status == 200
    status, headers, body = fetch(f"{server.http}/tts?{urllib.parse.urlencode(query | {'captions': fmt})}")
    assert status == 200, body
    assert headers["Content-Type"] == {"vtt": "text/vtt; charset=utf-8", "srt": "application/x-subrip; charset=utf-8"}[fmt]
    cues = (read_vtt if fmt == "vtt" else read_srt)(body.decode("utf-8"))
    # The cues time the audio /tts gives for the same request, but the two requests are
    # cut into runs by the time each finds in hand (paced runs, learned on this box),
    # and the cuts move the trims and the pauses: 8.005 against 7.93 s, and 8.235 against
    # 7.835 s on a loaded box. Hence a tenth of room.
    assert cues[-1].end_ms / 1000 <= 1.1 * wav_seconds(wav) + FRAME_S
    assert cues[0].start_ms / 1000 < 1.0
    sep = " " if fmt == "vtt" else ""
    shown = sep.join(line for c in cues for line in c.lines)
    assert "".join(shown.split()) == "".join(text.split())  # all of it, in order, as written


def test_tts_captions_leave_markup_out_and_its_pause_between_cues(server: ServerThread) -> None:
    text = ('Doors closing <break time="1.5s"/> now. Next stop: <sub alias="Central">Ctrl</sub> Station &amp; the '
            '<say-as interpret-as="characters">UN</say-as> plaza.')
    query = urllib.parse.urlencode({"text": text, "voice": "kokoro/af_heart", "captions": "vtt"})
    status, _, body = fetch(f"{server.http}/tts?{query}")
    assert status == 200
    assert "Station &amp; the UN plaza." in body.decode()  # the text as shown, escaped as WebVTT wants
    cues = read_vtt(body.decode())
    assert [c.lines for c in cues] == [("Doors closing",), ("now.",), ("Next stop: Ctrl Station & the UN plaza.",)]
    assert cues[1].start_ms - cues[0].end_ms >= 1500 - 1000 * FRAME_S  # the break, in the timing


def test_tts_captions_stream_cue_by_cue(server: ServerThread) -> None:
    text = " ".join([PARAGRAPH] * 4)
    before = done_count(server)
    query = urllib.parse.urlencode({"text": text, "voice": "kokoro/af_heart", "captions": "vtt"})
    with requests.get(f"{server.http}/tts?{query}", stream=True, timeout=300) as r:
        assert r.status_code == 200 and "content-length" not in r.headers
        chunks = r.iter_content(chunk_size=None)
        got = b""
        while b"-->" not in got:
            got += next(chunks)
        assert done_count(server) == before  # a cue in hand, the speech not finished
        got += b"".join(chunks)
    cues = read_vtt(got.decode())
    assert len(cues) >= 8 and "".join(" ".join(line for c in cues for line in c.lines).split()) == "".join(text.split())


def test_tts_captions_refusals_and_head(server: ServerThread) -> None:
    status, _, body = fetch(f"{server.http}/tts?text=hi&captions=ass")
    assert status == 400 and body.startswith(b"bad_message")
    r = requests.head(f"{server.http}/tts?text=hi&captions=vtt", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/vtt")


def test_rtts_say_with_the_default_voice(tmp_path: Path) -> None:
    """English with no voice named (Hibari): the cues lie over the speech of the WAV."""
    out, srt = tmp_path / "b.wav", tmp_path / "b.srt"
    models = tmp_path / "models"
    models.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-m", "rtts", "say", ENGLISH, "-o", str(out), "--srt", str(srt),
         "--models-dir", str(models), "--cache-dir", str(_CACHE)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert done.returncode == 0, done.stderr
    cues = read_srt(srt.read_text(encoding="utf-8"))
    samples = audio.decode(out.read_bytes()[44:], "pcm16")
    rate = int.from_bytes(out.read_bytes()[24:28], "little")
    assert cues[-1].end_ms / 1000 <= len(samples) / rate + FRAME_S
    assert " ".join(line for c in cues for line in c.lines) == ENGLISH
    # Each cue lies over speech in that WAV, not over its pauses.
    for c in cues:
        part = samples[c.start_ms * rate // 1000:c.end_ms * rate // 1000]
        assert float(np.sqrt(np.mean(part**2))) > 0.01, c


def test_rtts_say_writes_the_subtitles_beside_the_wav(tmp_path: Path) -> None:
    out, vtt, srt = tmp_path / "a.wav", tmp_path / "a.vtt", tmp_path / "a.srt"
    models = tmp_path / "models"
    models.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-m", "rtts", "say", JAPANESE, "-o", str(out), "--vtt", str(vtt), "--srt", str(srt),
         "--voice", "kokoro/jf_alpha", "--models-dir", str(models), "--cache-dir", str(_CACHE)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert done.returncode == 0, done.stderr
    seconds = wav_seconds(out.read_bytes())
    cues = read_vtt(vtt.read_text(encoding="utf-8"))
    assert cues == read_srt(srt.read_text(encoding="utf-8"))
    assert cues[-1].end_ms / 1000 <= seconds + FRAME_S
    assert "".join(line for c in cues for line in c.lines) == JAPANESE
    assert f"{vtt}: {len(cues)} cues" in done.stderr


def test_rtts_say_reads_stdin_takes_a_text_limit_and_never_speaks_of_unloading(tmp_path: Path) -> None:
    """Issue 30: ``rtts say -`` spoke the dash; no flag raised the text limit; a one-shot run
    said it would "unload after 300 s idle"."""
    out = tmp_path / "stdin.wav"
    models = tmp_path / "models"
    models.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    say = [sys.executable, "-m", "rtts", "say", "-", "--models-dir", str(models), "--cache-dir", str(_CACHE)]
    done = subprocess.run([*say, "-o", str(out)], input=ENGLISH + "\n", capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert "unload" not in done.stderr
    samples, rate = audio.read_wav(out)
    is_speech(samples, rate, ENGLISH)  # the text, not "-" (a fraction of a second)
    done = subprocess.run([*say, "-o", str(tmp_path / "long.wav"), "--max-text-chars", "20"], input=ENGLISH,
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2 and "text_too_long" in done.stderr and "--max-text-chars" in done.stderr
    assert not (tmp_path / "long.wav").exists()
    done = subprocess.run([*say, "-o", str(tmp_path / "nope.wav"), "--voice", "nope"], input=ENGLISH,
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2 and "rtts: unknown_voice: no voice 'nope'; see `rtts voices`" in done.stderr
