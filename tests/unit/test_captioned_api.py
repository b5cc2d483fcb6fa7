"""rtts.captioned_api without a network: Kokoro-FastAPI's request body, its voices and
languages, the timestamps and the JSON lines."""

from __future__ import annotations

import base64
import json
from http import HTTPStatus

import numpy as np
import pytest

from rtts import audio, protocol
from rtts.captioned_api import CaptionedBody, parse, timestamps
from rtts.engines.base import VoiceInfo
from rtts.openai_api import ApiError, voice_table

HEART = "kokoro/af_heart"
JOE = "piper/en_US-joe-medium"
VOICES = {v: VoiceInfo(id=v, name=v, langs=("en",), engine=v.split("/")[0], native_rate=24000, model=v.split("/")[0])
          for v in (HEART, JOE, "kokoro/zf_xiaobei")}
TABLE = voice_table((), VOICES, JOE)


def body(**fields) -> bytes:  # type: ignore[no-untyped-def]
    return json.dumps({k: v for k, v in ({"input": "Hello world!"} | fields).items() if v is not ...}).encode()


def test_kokoro_fastapis_defaults() -> None:
    r = parse(body(), TABLE, VOICES)
    assert (r.voice, r.lang, r.speed, r.response_format, r.stream, r.timestamps, r.volume) == (
        None, None, 1.0, "mp3", True, True, 1.0)


def test_the_body_its_readme_sends() -> None:
    r = parse(body(model="kokoro", voice="af_bella", speed=1.0, response_format="mp3", stream=False), TABLE, VOICES)
    assert (r.voice, r.stream) == ("af_bella", False)  # not installed here: the session says unknown_voice


@pytest.mark.parametrize(("voice", "resolved"), [
    ("af_heart", HEART),  # a bare Kokoro name
    (HEART, HEART),
    (JOE, JOE),
    ("alloy", HEART),  # an OpenAI name, through the speech route's table
    ("zf_xiaobei", "kokoro/zf_xiaobei"),
])
def test_voices(voice: str, resolved: str) -> None:
    assert parse(body(voice=voice), TABLE, VOICES).voice == resolved


def test_kokoros_default_voice_when_it_is_not_installed_is_no_voice() -> None:
    assert parse(body(voice="af_heart"), TABLE, {JOE: VOICES[JOE]}).voice is None


@pytest.mark.parametrize(("code", "lang"), [("a", "en"), ("b", "en-gb"), ("z", "zh"), ("j", "ja"), ("p", "pt-br"),
                                            ("e", "es"), ("fr", "fr")])
def test_kokoro_language_letters(code: str, lang: str) -> None:
    assert parse(body(lang_code=code), TABLE, VOICES).lang == lang


@pytest.mark.parametrize(("fields", "param", "code"), [
    ({"input": ...}, "input", "missing_field"),
    ({"input": "  "}, "input", "bad_message"),
    ({"input": 5}, "input", "bad_message"),
    ({"voice": "af_bella+af_sky"}, "voice", "unknown_voice"),
    ({"voice": "af_bella(2)+af_sky(1)"}, "voice", "unknown_voice"),
    ({"response_format": "ogg"}, "response_format", "bad_message"),
    ({"speed": 5}, "speed", "bad_message"),
    ({"speed": True}, "speed", "bad_message"),
    ({"stream": "yes"}, "stream", "bad_message"),
    ({"return_timestamps": 1}, "return_timestamps", "bad_message"),
    ({"volume_multiplier": -1}, "volume_multiplier", "bad_message"),
    ({"allow_voice_tags": True}, "allow_voice_tags", "bad_message"),
    ({"normalization_options": "off"}, "normalization_options", "bad_message"),
])
def test_bad_bodies(fields: dict, param: str, code: str) -> None:
    with pytest.raises(ApiError) as info:
        parse(body(**fields), TABLE, VOICES)
    assert (info.value.status, info.value.param, info.value.code) == (HTTPStatus.BAD_REQUEST, param, code)


def test_what_rtts_does_not_use_is_accepted() -> None:
    r = parse(body(ssml=True, return_download_link=True, download_format="wav", voice_aliases={"n": "af_heart"},
                   normalization_options={"normalize": False}, allow_voice_tags=False, model="tts-1"), TABLE, VOICES)
    assert r.text == "Hello world!"


WORDS = [{"text": "$23.50", "text_start": 0, "text_end": 6, "said": "twenty-three dollars and fifty cents",
          "start": 2400, "end": 36000}]


def test_timestamps_are_kokoros_with_rtts_fields_beside() -> None:
    assert timestamps(WORDS, 24000) == [{"word": "$23.50", "start_time": 0.1, "end_time": 1.5,
                                         "said": "twenty-three dollars and fifty cents", "text_start": 0, "text_end": 6}]


def lines(data: bytes) -> list[dict]:
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.decode().splitlines()]


def test_streamed_lines_carry_the_words_with_the_audio_after_them() -> None:
    b = CaptionedBody(parse(body(response_format="pcm"), TABLE, VOICES))
    tone = np.sin(np.arange(4800) / 10).astype(np.float32) * 0.5
    b.words(protocol.Words("u", WORDS), 24000)
    first = lines(b.frame(tone) or b"")
    second = lines(b.frame(tone) or b"")
    last = b.end()
    assert first[0]["timestamps"][0]["word"] == "$23.50" and second[0]["timestamps"] == []
    assert first[0]["audio_format"].startswith("audio/pcm")
    pcm = b"".join(base64.b64decode(line["audio"]) for line in first + second + (lines(last) if last else []))
    assert np.allclose(audio.decode(pcm, "pcm16"), np.concatenate([tone, tone]), atol=1e-4)


def test_whole_it_is_one_object_and_the_volume_applies() -> None:
    b = CaptionedBody(parse(body(response_format="pcm", stream=False, volume_multiplier=2), TABLE, VOICES))
    b.words(protocol.Words("u", WORDS), 24000)
    assert b.frame(np.full(480, 0.25, np.float32)) is None and b.frame(np.full(480, 0.75, np.float32)) is None
    obj = json.loads(b.end())
    samples = audio.decode(base64.b64decode(obj["audio"]), "pcm16")
    assert np.allclose(samples[:480], 0.5, atol=1e-3) and np.allclose(samples[480:], 1.0, atol=1e-3)  # clipped
    assert [t["word"] for t in obj["timestamps"]] == ["$23.50"]


def test_without_timestamps() -> None:
    whole = CaptionedBody(parse(body(response_format="wav", stream=False, return_timestamps=False), TABLE, VOICES))
    whole.frame(np.zeros(480, np.float32))
    assert json.loads(whole.end())["timestamps"] is None  # as Kokoro-FastAPI answers
    streamed = CaptionedBody(parse(body(response_format="wav", return_timestamps=False), TABLE, VOICES))
    out = (streamed.frame(np.zeros(480, np.float32)) or b"") + streamed.end()
    assert all(line["timestamps"] == [] for line in lines(out))
