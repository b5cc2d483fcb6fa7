"""rtts.serve.openai_api without a network: request parsing, the voice table, error shapes, the body."""

from __future__ import annotations

import base64
import json
from http import HTTPStatus

import numpy as np
import pytest

from rtts import protocol
from rtts.engines.base import VoiceInfo
from rtts.engines.voices import routes
from rtts.serve import openai_api
from rtts.serve.openai_api import ApiError, SpeechBody, VoiceNames, parse_speech
from rtts.sound import audio

JOE = "piper/en_US-joe-medium"


def voices(*ids: str) -> dict[str, VoiceInfo]:
    out = {}
    for vid in ids:
        engine = vid.split("/")[0]
        out[vid] = VoiceInfo(id=vid, name=vid.split("/")[1], langs=("en",), engine=engine, native_rate=24000, model=engine)
    return out


def names(found: dict[str, VoiceInfo], default: str = JOE, overrides: tuple[tuple[str, str], ...] = ()) -> VoiceNames:
    return VoiceNames(found, routes(found, default, ()), default, overrides)


def request(**fields) -> bytes:  # type: ignore[no-untyped-def]
    body = {"model": "tts-1", "input": "Hello there.", "voice": "alloy"} | fields
    return json.dumps({k: v for k, v in body.items() if v is not ...}).encode()


TABLE = names(voices(JOE))


def test_every_openai_name_speaks_with_an_installed_voice() -> None:
    assert set(TABLE.table) >= {"alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer",
                                "verse"}
    assert {TABLE.pick(name, "en") for name in TABLE.table} == {JOE}  # no Kokoro voice here: the default's
    with_kokoro = names(voices(JOE, "kokoro/af_heart", "kokoro/am_michael"))
    assert with_kokoro.pick("alloy", "en") == "kokoro/af_heart" and with_kokoro.pick("onyx", "en") == "kokoro/am_michael"
    overridden = names(voices(JOE, "kokoro/af_heart"), overrides=(("alloy", JOE), ("nova", "nope/none")))
    assert overridden.pick("alloy", "en") == JOE
    assert overridden.pick("nova", "en") == "kokoro/af_heart"  # an uninstalled override is ignored


# What the shipped packs hold, by language and gender (``rtts voices``).
PACKS = {
    "hibari/heart": (("en",), "female"), JOE: (("en",), None),
    "kokoro/af_heart": (("en", "zh", "ja"), "female"), "kokoro/am_michael": (("en", "zh", "ja"), "male"),
    "kokoro/bm_george": (("en-gb", "en", "zh", "ja"), "male"),
    "kokoro/zf_xiaobei": (("zh", "en", "ja"), "female"), "kokoro/zf_xiaoxiao": (("zh", "en", "ja"), "female"),
    "kokoro/zm_yunxi": (("zh", "en", "ja"), "male"), "kokoro/zm_yunjian": (("zh", "en", "ja"), "male"),
    "kokoro/jf_alpha": (("ja", "en", "zh"), "female"), "kokoro/jm_kumo": (("ja", "en", "zh"), "male"),
    "kokoro/ef_dora": (("es", "en"), "female"), "kokoro/em_alex": (("es", "en"), "male"),
}
SHIPPED = {vid: VoiceInfo(id=vid, name=vid, langs=langs, engine=vid.split("/")[0], native_rate=24000,
                          model=vid.split("/")[0], gender=gender) for vid, (langs, gender) in PACKS.items()}
LANG_VOICES = (("zh", "kokoro/zf_xiaoxiao"), ("ja", "kokoro/jf_alpha"))
SHIPPED_NAMES = VoiceNames(SHIPPED, routes(SHIPPED, "hibari/heart", LANG_VOICES), "hibari/heart")
MANDARIN = "各位旅客，G123次列车即将进站，请在3号站台候车。"


@pytest.mark.parametrize(("voice", "text", "spoken_by"), [
    # Chinese read by a Mandarin voice of the name's gender, never by an American one (issue 30).
    ("alloy", MANDARIN, "kokoro/zf_xiaoxiao"),
    ("nova", MANDARIN, "kokoro/zf_xiaoxiao"),  # its own (zf_xiaoni) is not here: the language's, also female
    ("onyx", MANDARIN, "kokoro/zm_yunjian"),
    ("echo", MANDARIN, "kokoro/zm_yunxi"),  # its own (zm_yunyang) is not here: the first male Mandarin voice
    ("alloy", "次は渋谷です。お出口は右側です。", "kokoro/jf_alpha"),
    ("onyx", "次は渋谷です。", "kokoro/jm_kumo"),
    ("alloy", "The 10:30 train leaves from platform 4.", "kokoro/af_heart"),
    ("onyx", "The 10:30 train leaves from platform 4.", "kokoro/am_michael"),
    ("ballad", "The 10:30 train leaves from platform 4.", "kokoro/bm_george"),  # British English is English
    ("ALLOY", MANDARIN, "kokoro/zf_xiaoxiao"),
    # Mostly Chinese with a few English words: the language most of it is in.
    ("alloy", "Welcome! 各位旅客，欢迎乘坐本次列车，列车即将进站。", "kokoro/zf_xiaoxiao"),
    ("alloy", "Welcome aboard flight CA1234 to Beijing, 北京.", "kokoro/af_heart"),
    # The server's choice, as a WebSocket speak without a voice: the session picks per language.
    (None, MANDARIN, None),
    ("auto", MANDARIN, None),
    ("Auto", "Hello.", None),
    # A voice id is a voice id; anything else is left for the session to refuse.
    ("kokoro/af_heart", MANDARIN, "kokoro/af_heart"),
    ("nope", MANDARIN, "nope"),
])
def test_openai_names_read_the_texts_language(voice: str | None, text: str, spoken_by: str | None) -> None:
    assert SHIPPED_NAMES.resolve(voice, text) == spoken_by


def test_a_name_keeps_its_gender_where_only_the_languages_own_voice_differs() -> None:
    spanish = "El próximo tren a Madrid sale a las diez."
    assert SHIPPED_NAMES.resolve("onyx", spanish, "es") == "kokoro/em_alex"
    assert SHIPPED_NAMES.resolve("alloy", spanish, "es") == "kokoro/ef_dora"
    # A language no voice speaks (Korean) leaves the voice to the session, which refuses the text.
    assert SHIPPED_NAMES.resolve("alloy", "안녕하세요") is None


def test_an_override_goes_first_for_its_own_language() -> None:
    over = VoiceNames(SHIPPED, routes(SHIPPED, "hibari/heart", LANG_VOICES), "hibari/heart",
                      (("alloy", "kokoro/zf_xiaobei"), ("alloy", JOE)))
    assert over.resolve("alloy", MANDARIN) == "kokoro/zf_xiaobei"
    assert over.resolve("alloy", "Hello there.") == JOE
    assert over.resolve("alloy", "次は渋谷です。") == "kokoro/jf_alpha"  # no override for Japanese: the table's


def test_a_full_request_parses() -> None:
    r = parse_speech(request(voice="ALLOY", response_format="flac", speed=1.5, stream_format="sse"), TABLE)
    assert (r.text, r.voice, r.speed, r.response_format, r.stream_format, r.model) == (
        "Hello there.", JOE, 1.5, "flac", "sse", "tts-1")
    assert parse_speech(request(voice=JOE), TABLE).voice == JOE
    assert parse_speech(request(voice={"id": JOE}), TABLE).voice == JOE
    r = parse_speech(request(response_format=..., speed=..., model=...), TABLE)
    assert (r.response_format, r.speed, r.stream_format, r.model) == ("mp3", 1.0, "audio", None)  # OpenAI's defaults
    assert parse_speech(request(speed=4.0), TABLE).speed == protocol.SPEED_RANGE[1]
    assert parse_speech(request(speed=0.25), TABLE).speed == protocol.SPEED_RANGE[0]
    # An unknown voice id passes here: the session refuses it, with the code a WebSocket gets.
    assert parse_speech(request(voice="nope"), TABLE).voice == "nope"
    # No voice, null or "auto": the server's choice, not 400 (Open WebUI may send none).
    for voice in (..., None, "auto"):
        assert parse_speech(request(voice=voice), TABLE).voice is None


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (b"not json", None, "bad_frame"),
        (b"[1, 2]", None, "bad_frame"),
        # 20,000 levels: json.loads raised RecursionError, a 500 with a traceback.
        pytest.param(b'{"input": ' * 20000 + b"1" + b"}" * 20000, None, "bad_frame", id="nested-objects"),
        pytest.param(b'{"input": "Hi.", "voice": "alloy", "x": ' + b"[" * 20000 + b"]" * 20000 + b"}",
                     None, "bad_frame", id="nested-arrays"),
        pytest.param('{"input": "Hi.", "voice": "alloy"}'.encode("utf-16"), None, "bad_frame", id="utf-16"),
        pytest.param(b'{"input": "Hi.", "voice": "alloy", "speed": NaN}', None, "bad_frame", id="nan"),
        (request(input=...), "input", "missing_field"),
        (request(input="   "), "input", "bad_message"),
        (request(input=5), "input", "bad_message"),
        (request(voice=["alloy"]), "voice", "bad_message"),
        (request(response_format="ogg"), "response_format", "bad_message"),
        (request(stream_format="chunks"), "stream_format", "bad_message"),
        (request(speed=5), "speed", "bad_message"),
        (request(speed="fast"), "speed", "bad_message"),
        (request(speed=True), "speed", "bad_message"),
        (request(instructions=3), "instructions", "bad_message"),
    ],
)
def test_bad_requests_get_400_in_openais_shape(body: bytes, param: str | None, code: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_speech(body, TABLE)
    err = info.value
    assert err.status == HTTPStatus.BAD_REQUEST
    shape = json.loads(err.body())
    assert set(shape) == {"error"} and set(shape["error"]) == {"message", "type", "param", "code"}
    assert shape["error"]["type"] == "invalid_request_error"
    assert (shape["error"]["param"], shape["error"]["code"]) == (param, code)


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        (protocol.ErrorCode.UNKNOWN_VOICE, 400, "invalid_request_error"),
        (protocol.ErrorCode.TEXT_TOO_LONG, 400, "invalid_request_error"),
        (protocol.ErrorCode.UNAUTHORIZED, 401, "authentication_error"),
        (protocol.ErrorCode.BUSY, 503, "server_error"),
        (protocol.ErrorCode.INTERNAL, 500, "server_error"),
    ],
)
def test_session_errors_map_to_statuses(code: protocol.ErrorCode, status: int, kind: str) -> None:
    err = openai_api.from_protocol(protocol.ProtocolError(code, "why"))
    assert err.status == status and err.type == kind and err.code == code.value


def frames(n: int) -> list[np.ndarray]:
    t = np.arange(n) / 24000
    x = (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    return [x[i : i + 480] for i in range(0, n, 480)]


def test_body_streams_a_wav_frame_by_frame() -> None:
    body = SpeechBody(parse_speech(request(response_format="wav"), TABLE))
    assert body.content_type() == "audio/wav"
    pieces = [body.frame(f) for f in frames(4800)]
    assert all(pieces) and pieces[0][:4] == b"RIFF"  # type: ignore[index]  # the header goes with the first frame
    samples, rate = audio.read_wav(b"".join(pieces) + body.end(200.0))  # type: ignore[arg-type]
    assert rate == 24000 and len(samples) == 4800


def test_sse_deltas_carry_the_format_bytes_and_done_carries_usage() -> None:
    body = SpeechBody(parse_speech(request(response_format="pcm", stream_format="sse"), TABLE))
    assert body.content_type() == "text/event-stream"
    raw = b"".join(p for p in (body.frame(f) for f in frames(2400)) if p) + body.end(100.0)
    events = [json.loads(line[len(b"data: "):]) for line in raw.split(b"\n\n") if line]
    assert [e["type"] for e in events] == ["speech.audio.delta"] * 5 + ["speech.audio.done"]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert len(pcm) == 2400 * 2
    usage = events[-1]["usage"]
    assert usage["input_tokens"] == len("Hello there.") and usage["output_tokens"] == 5
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_a_failure_after_the_status_ends_sse_with_an_error_event() -> None:
    err = openai_api.from_protocol(protocol.ProtocolError(protocol.ErrorCode.INTERNAL, "boom"))
    sse_body, plain_body = SpeechBody(parse_speech(request(stream_format="sse"), TABLE)), SpeechBody(parse_speech(request(), TABLE))
    try:
        sse = sse_body.failed(err)
        assert json.loads(sse[len(b"data: "):])["error"]["type"] == "server_error"
        assert plain_body.failed(err) == b""
    finally:  # as the route does: an encoder left open is counted for good (rtts_encoders_open)
        sse_body.encoder.close()
        plain_body.encoder.close()


def test_listings() -> None:
    assert {m["id"] for m in openai_api.models()["data"]} >= {"tts-1", "tts-1-hd"}
    listed = openai_api.audio_voices(TABLE)["voices"]
    assert listed[0]["id"] == JOE and {"alloy", "nova"} <= {v["id"] for v in listed}
    alloy = next(v for v in openai_api.audio_voices(SHIPPED_NAMES)["voices"] if v["id"] == "alloy")
    assert alloy["voice"] == "kokoro/af_heart"
    assert (alloy["voices"]["zh"], alloy["voices"]["ja"]) == ("kokoro/zf_xiaoxiao", "kokoro/jf_alpha")
