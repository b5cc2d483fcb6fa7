"""rtts.serve.captioned_api without a network: Kokoro-FastAPI's request body, its voices and
languages, the timestamps and the JSON lines."""

from __future__ import annotations

import base64
import json
from http import HTTPStatus

import numpy as np
import pytest

from rtts import protocol
from rtts.engines.base import VoiceInfo
from rtts.engines.voices import routes
from rtts.host.memory import WholeBodies
from rtts.serve.captioned_api import (
    CaptionedBody,
    CaptionedRequest,
    parse,
    speech_seconds,
    timestamps,
    whole_size,
)
from rtts.serve.openai_api import ApiError, VoiceNames
from rtts.sound import audio, codecs

HEART = "kokoro/af_heart"
JOE = "piper/en_US-joe-medium"
VOICES = {v: VoiceInfo(id=v, name=v, langs=("en",), engine=v.split("/")[0], native_rate=24000, model=v.split("/")[0])
          for v in (HEART, JOE, "kokoro/zf_xiaobei")}
TABLE = VoiceNames(VOICES, routes(VOICES, JOE, ()), JOE)


def body(**fields) -> bytes:  # type: ignore[no-untyped-def]
    return json.dumps({k: v for k, v in ({"input": "Hello world!"} | fields).items() if v is not ...}).encode()


def test_kokoro_fastapis_defaults() -> None:
    r = parse(body(), TABLE)
    assert (r.voice, r.lang, r.speed, r.response_format, r.stream, r.timestamps, r.volume) == (
        None, None, 1.0, "mp3", True, True, 1.0)


def test_the_body_its_readme_sends() -> None:
    r = parse(body(model="kokoro", voice="af_bella", speed=1.0, response_format="mp3", stream=False), TABLE)
    assert (r.voice, r.stream) == ("af_bella", False)  # not installed here: the session says unknown_voice


@pytest.mark.parametrize(("voice", "resolved"), [
    ("af_heart", HEART),  # a bare Kokoro name
    (HEART, HEART),
    (JOE, JOE),
    ("alloy", HEART),  # an OpenAI name, through the speech route's table
    ("zf_xiaobei", "kokoro/zf_xiaobei"),
])
def test_voices(voice: str, resolved: str) -> None:
    assert parse(body(voice=voice), TABLE).voice == resolved


def test_an_openai_name_reads_the_texts_language() -> None:
    found = {vid: VoiceInfo(id=vid, name=vid, langs=langs, engine="kokoro", native_rate=24000, model="kokoro",
                            gender="female") for vid, langs in ((HEART, ("en", "zh")), ("kokoro/zf_xiaobei", ("zh", "en")))}
    names = VoiceNames(found, routes(found, HEART, ()), HEART)
    assert parse(body(voice="alloy", input="北京时间下午三点，列车即将进站。"), names).voice == "kokoro/zf_xiaobei"
    assert parse(body(voice="alloy", input="Hello there."), names).voice == HEART
    assert parse(body(voice="alloy", input="Hello there.", lang_code="z"), names).voice == "kokoro/zf_xiaobei"
    assert parse(body(voice="auto"), names).voice is None


def test_kokoros_default_voice_when_it_is_not_installed_is_no_voice() -> None:
    joe_only = {JOE: VOICES[JOE]}
    assert parse(body(voice="af_heart"), VoiceNames(joe_only, routes(joe_only, JOE, ()), JOE)).voice is None


@pytest.mark.parametrize(("code", "lang"), [("a", "en"), ("b", "en-gb"), ("z", "zh"), ("j", "ja"), ("p", "pt-br"),
                                            ("e", "es"), ("fr", "fr")])
def test_kokoro_language_letters(code: str, lang: str) -> None:
    assert parse(body(lang_code=code), TABLE).lang == lang


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
        parse(body(**fields), TABLE)
    assert (info.value.status, info.value.param, info.value.code) == (HTTPStatus.BAD_REQUEST, param, code)


def test_what_rtts_does_not_use_is_accepted() -> None:
    r = parse(body(ssml=True, return_download_link=True, download_format="wav", voice_aliases={"n": "af_heart"},
                   normalization_options={"normalize": False}, allow_voice_tags=False, model="tts-1"), TABLE)
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
    b = CaptionedBody(parse(body(response_format="pcm"), TABLE))
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
    b = CaptionedBody(parse(body(response_format="pcm", stream=False, volume_multiplier=2), TABLE))
    b.words(protocol.Words("u", WORDS), 24000)
    assert b.frame(np.full(480, 0.25, np.float32)) is None and b.frame(np.full(480, 0.75, np.float32)) is None
    obj = whole_object(b)
    samples = audio.decode(base64.b64decode(obj["audio"]), "pcm16")
    assert np.allclose(samples[:480], 0.5, atol=1e-3) and np.allclose(samples[480:], 1.0, atol=1e-3)  # clipped
    assert [t["word"] for t in obj["timestamps"]] == ["$23.50"]


def test_without_timestamps() -> None:
    whole = CaptionedBody(parse(body(response_format="wav", stream=False, return_timestamps=False), TABLE))
    whole.frame(np.zeros(480, np.float32))
    assert whole_object(whole)["timestamps"] is None  # as Kokoro-FastAPI answers
    streamed = CaptionedBody(parse(body(response_format="wav", return_timestamps=False), TABLE))
    out = (streamed.frame(np.zeros(480, np.float32)) or b"") + streamed.end()
    assert all(line["timestamps"] == [] for line in lines(out))


# ---------------------------------------------------------------- whole bodies (issue 30)


def whole_object(b: CaptionedBody) -> dict:
    assert b.end() == b""
    data = b"".join(b.whole().pieces())
    assert len(data) == len(b.whole())
    return json.loads(data)


def test_a_whole_body_is_the_same_bytes_as_one_dump_whatever_the_frames() -> None:
    # Frames of lengths that are no multiple of 3 bytes: the base64 of each piece must join
    # into the base64 of the whole.
    grown: list[int] = []
    b = CaptionedBody(parse(body(response_format="pcm", stream=False), TABLE), grown.append)
    b.words(protocol.Words("u", WORDS), 24000)
    rng = np.random.default_rng(30)
    frames = [rng.uniform(-0.5, 0.5, n).astype(np.float32) for n in (1, 7, 480, 1001, 2, 33_333)]
    pcm = b"".join(audio.encode(f, "pcm16") for f in frames)
    for f in frames:
        assert b.frame(f) is None
    assert b.end() == b""
    made = b.whole()
    expected = json.dumps({"audio": base64.b64encode(pcm).decode(), "audio_format": b.audio_format,
                           "timestamps": timestamps(WORDS, 24000)}, ensure_ascii=False, separators=(",", ":"))
    assert b"".join(made.pieces()) == expected.encode() + b"\n"  # what it was when dumped at once
    assert sum(grown) == len(made.audio) == len(base64.b64encode(pcm))  # the ledger saw every byte it holds
    assert [len(p) for p in made.pieces()][1:-1] == [65536] * (len(made.audio) // 65536) + [len(made.audio) % 65536]


def test_a_whole_wav_says_its_length_where_a_streamed_one_cannot() -> None:
    # A whole body's WAV is known to its end: Python's wave, which has no "unknown", must
    # read its real length (a streamed WAV says 0xFFFFFFFF, "until the data ends").
    import io
    import wave

    b = CaptionedBody(parse(body(response_format="wav", stream=False), TABLE))
    frames = [np.full(n, 0.25, np.float32) for n in (1, 480, 1001, 24_000)]
    for f in frames:
        b.frame(f)
    b.end()
    data = base64.b64decode(bytes(b.whole().audio))
    with wave.open(io.BytesIO(data)) as w:
        assert w.getnframes() == sum(f.size for f in frames) == len(w.readframes(10**7)) // 2
    streamed = CaptionedBody(parse(body(response_format="wav", stream=True), TABLE))
    line = streamed.frame(frames[-1]) or b""
    head = base64.b64decode(json.loads(line)["audio"])[:44]
    assert head[4:8] == head[40:44] == b"\xff\xff\xff\xff"


def request(text: str, **fields) -> CaptionedRequest:  # type: ignore[no-untyped-def]
    return parse(body(input=text, stream=False, **fields), TABLE)


def test_speech_seconds_is_above_what_each_kind_of_text_made() -> None:
    # Seconds the default voices made for these texts (rtts say, 2026-12): the estimate is above each.
    made = {
        "The 10:30 train to Boston costs $23.50. Please mind the gap, and have a good trip!": 6.57,
        "Call 555 1234 or 1,234,567 dollars on 12/31/2026.": 9.95,
        "北京时间2026年3月15日下午三点，列车即将进站。请大家站在黄线以外，注意安全。": 8.03,
        "欢迎乘坐本次列车，下一站是杭州东站。请您提前做好下车准备。": 6.45,
        "次の電車は、十時三十分に三番線から発車いたします。お急ぎください。": 5.83,
    }
    for text, seconds in made.items():
        estimate = speech_seconds(text, 1.0, 600, 60)
        assert seconds < estimate < 2.5 * seconds, (text, estimate)
    # Slower speech is longer; pauses count (each break at most 10 s, all at most max_pause);
    # nothing is over max_audio, where the session ends an utterance.
    assert speech_seconds("Hello there.", 0.5, 600, 60) == pytest.approx(2 * speech_seconds("Hello there.", 1, 600, 60))
    assert speech_seconds('a<break time="9s"/>b', 1, 600, 60) >= 9
    tags = '<break time="9s"/>' * 20
    assert speech_seconds(tags, 1, 600, 60) - speech_seconds(tags.replace("break", "brake"), 1, 600, 60) == 60
    assert speech_seconds("x" * 100_000, 0.5, 600, 60) == 600


def test_whole_size_is_the_audio_as_base64_in_its_format() -> None:
    text = "The next train leaves from platform four. " * 10  # 420 characters: 42 s at most
    wav, mp3 = whole_size(request(text, response_format="wav"), 600, 60), whole_size(request(text), 600, 60)
    seconds = speech_seconds(text, 1, 600, 60)
    assert 48_000 * seconds * 4 / 3 < wav < 48_000 * seconds * 4 / 3 + len(text) * 60 + 1000
    assert mp3 < wav / 6  # 48 kbit/s against 384
    bare = whole_size(request(text, response_format="wav", return_timestamps=False), 600, 60)
    assert wav - bare == len(text) * 60
    # The request: 5,000 characters at speed 0.5 (480 s of audio, a 30.8 MB body when made).
    big = request("Please mind the gap between the train and the platform. " * 90, response_format="wav", speed=0.5)
    assert whole_size(big, 600, 60) > 30.8e6


@pytest.mark.parametrize("fmt", ["wav", "pcm", "mp3", "opus", "aac", "flac"])
def test_a_formats_bound_holds_for_what_its_encoder_makes(fmt: str) -> None:
    if not codecs.usable(fmt):
        pytest.skip(f"{fmt} needs the codecs extra")
    # Noise is the hardest input for every encoder: FLAC cannot shrink it, the others add no less.
    samples = np.random.default_rng(1).uniform(-0.9, 0.9, 24000 * 4).astype(np.float32)
    encoder = codecs.stream_encoder(fmt, 24000)
    try:
        made = sum(len(encoder.push(samples[i:i + 480])) for i in range(0, len(samples), 480)) + len(encoder.finish())
    finally:
        encoder.close()
    assert made <= 4 * codecs.max_bytes_per_second(fmt, 24000) + 64, made


def test_whole_bodies_are_reserved_within_their_limit_and_left_out_of_the_servers_own() -> None:
    ledger = WholeBodies(100)
    first = ledger.reserve(60)
    assert first is not None and ledger.reserve(41) is None  # the room is reserved, not yet filled
    second = ledger.reserve(40)
    assert second is not None and ledger.pending() == 100
    first.fill(50)
    assert (ledger.held, ledger.pending()) == (50, 50)
    assert ledger.server_own(1000) == 950  # what the budget counts of the server: not the bodies
    first.fill(20)  # an estimate that fell short: held beyond its reservation
    assert (ledger.held, ledger.pending()) == (70, 30)
    first.release()
    first.release()  # twice: nothing
    assert (ledger.reserved, ledger.held) == (40, 0)
    assert ledger.reserve(60) is not None
    second.release()
    assert ledger.server_own(10) == 10
