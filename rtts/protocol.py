"""Wire protocol v1: message dataclasses and their msgpack encoding.

Pure: no sockets, no asyncio. Every WebSocket message is one binary frame holding one
msgpack map with a string ``type``. ``decode_client`` turns client bytes into a
message object or raises ``ProtocolError`` carrying a stable error code; the
contract, with message sequences, is ``docs/protocol.md``.

Unknown fields are ignored so that newer clients keep working with this server;
anything that would break an existing client needs a new ``v``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

import msgpack

VERSION = 1


class ErrorCode(StrEnum):
    BAD_FRAME = "bad_frame"  # not one msgpack map in a binary frame
    BAD_MESSAGE = "bad_message"  # a field has the wrong type or an invalid value
    UNKNOWN_TYPE = "unknown_type"
    MISSING_FIELD = "missing_field"
    UNKNOWN_VOICE = "unknown_voice"
    TEXT_TOO_LONG = "text_too_long"
    AUDIO_TOO_LONG = "audio_too_long"  # the utterance reached limits.max_audio_ms
    DUPLICATE_ID = "duplicate_id"
    UNKNOWN_ID = "unknown_id"
    UNAUTHORIZED = "unauthorized"
    BUSY = "busy"
    ENGINE_UNAVAILABLE = "engine_unavailable"
    UNSUPPORTED_LANGUAGE = "unsupported_language"
    INTERNAL = "internal"
    FORBIDDEN = "forbidden"  # publishing without the publish token
    QUEUE_FULL = "queue_full"  # the channel's queue holds limits.channel_queue announcements
    BUS_UNAVAILABLE = "bus_unavailable"  # the message bus between instances is down
    RATE_LIMITED = "rate_limited"  # over limits.message_rate: messages are dropped until the client slows down
    MEMORY_BUDGET = "memory_budget"  # the voice cannot fit limits.memory_budget_mb even alone (rtts/host/memory.py)


class CloseCode:
    GOING_AWAY = 1001  # server shutting down
    POLICY = 1008  # unauthorized
    TOO_BIG = 1009
    OVERLOADED = 1013


class ProtocolError(Exception):
    """A client message we refuse; becomes an ``error`` message, never a crash."""

    def __init__(self, code: ErrorCode, message: str, id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.id = id


# "opus": one raw Opus packet per frame (an extension of v1, with PyAV; see docs/protocol.md).
FORMATS = ("pcm16", "f32", "mulaw", "opus")
SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
FRAME_MS_RANGE = (10, 200)
SPEED_RANGE = (0.5, 2.0)
MAX_ID_CHARS = 128
MAX_CHANNEL_CHARS = 64
# The longest ``subscribe.ahead_ms``: Snapcast's buffer is 1 s by default; the lead it
# asks for is bounded by --sync-max-lead in any case.
MAX_AHEAD_MS = 10_000
PRIORITIES = ("normal", "high")
# What ``words`` may ask for: "word" (true), "char" (Chinese and Japanese character by
# character; other languages by word), "none" (false).
WORD_UNITS = ("word", "char", "none")
# Which waveform generator a voice with more than one speaks (an extension of v1, issue 31;
# Kokoro's: its own, "teacher", or the distilled one, "student"); "auto": the student in
# the languages where it passed its quality gates. A voice with one generator ignores it.
GENERATORS = ("auto", "student", "teacher")
CHANNEL_NAME = re.compile(r"[A-Za-z0-9._-]{1,%d}" % MAX_CHANNEL_CHARS)
# How far ahead ``publish.not_before`` may be (seconds): a day is enough to schedule
# tomorrow's opening announcement, and a millisecond timestamp (1000x a Unix time) or
# a typo is refused instead of holding a queue slot for millennia.
MAX_NOT_BEFORE_AHEAD_S = 24 * 3600.0
# JSON ("\ud800") and in-process callers can make a str no UTF-8 encoder takes (msgpack,
# Redis, the g2p front ends all fail on it, far from the edge): refused here instead.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# The C0 control characters but tab, newline and carriage return: no text needs them, and
# a NUL reaches C code that ends a string there (the g2p tables' marisa-trie answered
# with other words' entries, and Hibari failed on every route). Refused on every route,
# as a lone surrogate is, rather than dropped: the text the client meant is not guessed.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")

# msgpack's own structural limits: a client message is a small flat map, so anything
# deeper or wider is refused by the C decoder before it allocates (see
# shared/research/reliability.md §2 on preallocation bombs).
_MAX_ARRAY_LEN = 16
_MAX_MAP_LEN = 32
# The same for JSON (HTTP bodies, Wyoming events), whose decoder has no such limits: rtts's
# own JSON nests three deep; what nests deeper than this is refused.
MAX_JSON_DEPTH = 16


# ---------------------------------------------------------------- client → server


@dataclass(frozen=True)
class Hello:
    TYPE: ClassVar[str] = "hello"
    v: int = VERSION
    token: str | None = None
    voice: str | None = None
    lang: str | None = None
    speed: float | None = None
    sample_rate: int | None = None
    format: str | None = None
    frame_ms: int | None = None
    # Word timing for this connection's utterances (an extension of v1): true or "word",
    # "char" (Chinese and Japanese character by character), false or "none".
    words: bool | str | None = None
    generator: str | None = None  # GENERATORS, for this connection's utterances; None: the server's


@dataclass(frozen=True)
class Speak:
    TYPE: ClassVar[str] = "speak"
    id: str
    text: str
    voice: str | None = None
    lang: str | None = None
    speed: float | None = None
    interrupt: bool = False
    words: bool | str | None = None  # as hello.words, for this utterance
    generator: str | None = None  # as hello.generator, for this utterance


@dataclass(frozen=True)
class Append:
    TYPE: ClassVar[str] = "append"
    id: str
    text: str
    # Only the append that creates the utterance may choose these (an extension of v1).
    voice: str | None = None
    lang: str | None = None
    speed: float | None = None
    words: bool | str | None = None
    generator: str | None = None


@dataclass(frozen=True)
class Flush:
    TYPE: ClassVar[str] = "flush"
    id: str


@dataclass(frozen=True)
class Cancel:
    TYPE: ClassVar[str] = "cancel"
    id: str | None = None


@dataclass(frozen=True)
class Ping:
    TYPE: ClassVar[str] = "ping"
    t: Any = None


@dataclass(frozen=True)
class Subscribe:
    """Hear the announcements of ``channel`` (docs/protocol.md, "Channels")."""

    TYPE: ClassVar[str] = "subscribe"
    channel: str
    after: int | None = None  # the last announcement ``seq`` heard here: count what was missed since
    # How long before ``play_at`` this subscriber must have an announcement's audio: what its
    # output writes ahead (a Snapcast pipe source: snapserver's buffer). The channel's lead
    # covers the longest of its subscribers', within --sync-max-lead.
    ahead_ms: int | None = None


@dataclass(frozen=True)
class Unsubscribe:
    TYPE: ClassVar[str] = "unsubscribe"
    channel: str


@dataclass(frozen=True)
class Publish:
    """An announcement for every subscriber of ``channel``; ``token`` is the publish token."""

    TYPE: ClassVar[str] = "publish"
    channel: str
    text: str
    token: str | None = None
    voice: str | None = None
    lang: str | None = None
    speed: float | None = None
    priority: str = "normal"
    not_before: float | None = None  # Unix time (seconds) before which it is not spoken
    # Unix time on the shared clock at which it is to be heard (docs/protocol.md, "Playing in step").
    play_at: float | None = None
    generator: str | None = None  # as speak.generator, for every subscriber


ClientMessage = Hello | Speak | Append | Flush | Cancel | Ping | Subscribe | Unsubscribe | Publish

# ---------------------------------------------------------------- server → client


@dataclass(frozen=True)
class Ready:
    TYPE: ClassVar[str] = "ready"
    session: str
    sample_rate: int
    format: str
    frame_ms: int
    voices: list[dict[str, Any]]
    default_voice: str
    loaded: list[str]
    limits: dict[str, int | float]
    v: int = VERSION
    # The formats this server can send (an extension of v1: "opus" only where PyAV is installed).
    formats: list[str] | None = None
    # The shared clock announcements are timed on (an extension of v1, "Playing in step"):
    # {"source": "host" | "bus", "max_lead_ms": the most play_at is ever set ahead}.
    clock: dict[str, Any] | None = None
    # Streams of each engine the inference thread carries at once by this box's measurements
    # (an extension of v1, issue 32): {"kokoro": 3, "piper": 10, ...}; /readyz's capacity.
    capacity: dict[str, int] | None = None


@dataclass(frozen=True)
class Start:
    TYPE: ClassVar[str] = "start"
    id: str
    voice: str
    sample_rate: int
    format: str
    # Estimated milliseconds until the inference thread starts on this utterance (an
    # extension of v1; absent from older servers).
    expected_wait_ms: int | None = None
    # Estimated milliseconds until its first audio is made: the wait and its first run
    # (an extension of v1, issue 32; absent from older servers and for announcements,
    # which are heard at ``play_at``).
    expected_audio_ms: int | None = None
    # An announcement of a channel (extensions of v1): its channel, whole text and priority.
    channel: str | None = None
    text: str | None = None
    priority: str | None = None
    # An announcement's timeline (an extension of v1, "Playing in step"): the Unix time in
    # seconds, on the shared clock, at which its sample at pts 0 is heard; the same on every
    # instance. The sample at ``pts`` p is heard at ``play_at + p / sample_rate``.
    play_at: float | None = None
    # True: the server has no room for another stream now (its load is over
    # --admission-max-load) and this one waits until streams end (an extension of v1,
    # issue 32); ``expected_wait_ms`` counts that wait, from what the streams ahead of it
    # still have to say (``rtts.synthesis.room``). Absent: it is being made now.
    queued: bool | None = None


@dataclass(frozen=True)
class Audio:
    TYPE: ClassVar[str] = "audio"
    id: str
    seq: int
    pts: int
    data: bytes


@dataclass(frozen=True)
class Mark:
    TYPE: ClassVar[str] = "mark"
    id: str
    text: str
    pts: int
    kind: str = "sentence"  # "sentence": a text unit begins; "segment": a later language segment of it
    voice: str | None = None
    lang: str | None = None
    channel: str | None = None


@dataclass(frozen=True)
class Words:
    """When each word of an utterance is heard (asked for with ``words``; docs/protocol.md).

    Each entry is a map ``{text, text_start, text_end, said, start, end}``: the words as
    the client wrote them (code points of its text, markup included, ``text_end``
    exclusive; across appends, of all the text appended), what was read for them, and
    ``start``/``end`` in samples on the ``pts`` clock. Every word of the text is in
    exactly one entry, in order; sent before the audio it describes.
    """

    TYPE: ClassVar[str] = "words"
    id: str
    words: list[dict[str, Any]]
    channel: str | None = None


@dataclass(frozen=True)
class End:
    TYPE: ClassVar[str] = "end"
    id: str
    reason: str  # "done" | "cancelled" | "error"
    stats: dict[str, float] = field(default_factory=dict)
    channel: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class Error:
    TYPE: ClassVar[str] = "error"
    code: str
    message: str
    id: str | None = None


@dataclass(frozen=True)
class Pong:
    TYPE: ClassVar[str] = "pong"
    t: Any = None
    # The shared clock (Unix seconds) when the ping was handled: with the client's own
    # times of sending the ping and receiving this, one sample of its offset to the
    # server's clock (an extension of v1, "Playing in step"). Sent ahead of queued audio.
    server_time: float | None = None


@dataclass(frozen=True)
class Subscribed:
    """Answer to ``subscribe``: ``seq`` is the channel's last announcement so far, ``missed``
    how many announcements after ``subscribe.after`` this subscription will not play."""

    TYPE: ClassVar[str] = "subscribed"
    channel: str
    seq: int
    missed: int
    queue_limit: int


@dataclass(frozen=True)
class Unsubscribed:
    TYPE: ClassVar[str] = "unsubscribed"
    channel: str


@dataclass(frozen=True)
class Published:
    """Answer to ``publish``: the announcement's id and place; ``queued`` counts what waits
    before it on this instance's channel queue, of at most ``queue_limit``."""

    TYPE: ClassVar[str] = "published"
    channel: str
    id: str
    seq: int
    queued: int
    queue_limit: int


ServerMessage = Ready | Start | Audio | Mark | Words | End | Error | Pong | Subscribed | Unsubscribed | Published
Message = ClientMessage | ServerMessage

CLIENT_TYPES: dict[str, type] = {
    c.TYPE: c for c in (Hello, Speak, Append, Flush, Cancel, Ping, Subscribe, Unsubscribe, Publish)
}
SERVER_TYPES: dict[str, type] = {
    c.TYPE: c for c in (Ready, Start, Audio, Mark, Words, End, Error, Pong, Subscribed, Unsubscribed, Published)
}

# Accepted wire types per client field. bool is a subclass of int in Python, so the
# checks below exclude it explicitly where a number is wanted.
_INT = (int,)
_NUM = (int, float)
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "v": _INT,
    "token": (str,),
    "voice": (str,),
    "lang": (str,),
    "speed": _NUM,
    "sample_rate": _INT,
    "format": (str,),
    "frame_ms": _INT,
    "id": (str,),
    "text": (str,),
    "interrupt": (bool,),
    "channel": (str,),
    "after": _INT,
    "ahead_ms": _INT,
    "priority": (str,),
    "not_before": _NUM,
    "play_at": _NUM,
    "words": (bool, str),
    "generator": (str,),
}
_SCALAR = (type(None), bool, int, float, str)

# ---------------------------------------------------------------- encoding


def encode(msg: Message) -> bytes:
    """One message → the bytes of one binary frame. ``None`` fields are omitted."""
    body: dict[str, Any] = {"type": msg.TYPE}
    for f in dataclasses.fields(msg):
        value = getattr(msg, f.name)
        if value is not None:
            body[f.name] = value
    return msgpack.packb(body, use_bin_type=True)


def _unpack(data: bytes, max_bytes: int) -> dict[str, Any]:
    if len(data) > max_bytes:
        # websockets already closes with 1009 above max_size; this guards other callers.
        raise ProtocolError(ErrorCode.BAD_FRAME, f"message is larger than {max_bytes} bytes")
    try:
        obj = msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            max_str_len=max_bytes,
            max_bin_len=max_bytes,
            max_array_len=_MAX_ARRAY_LEN,
            max_map_len=_MAX_MAP_LEN,
            max_ext_len=0,
        )
    # msgpack documents that malformed input may raise beyond UnpackException
    # (ValueError, TypeError, StackError, ...), so everything here means "bad bytes".
    except Exception as exc:
        raise ProtocolError(ErrorCode.BAD_FRAME, f"not a msgpack message ({type(exc).__name__})") from None
    if not isinstance(obj, dict):
        raise ProtocolError(ErrorCode.BAD_FRAME, "a message must be a msgpack map")
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(ErrorCode.MISSING_FIELD, "message has no string field 'type'")
    return obj


def decode_json(data: bytes, *, max_bytes: int = 65536) -> dict[str, Any]:
    """UTF-8 JSON bytes (an HTTP body, a Wyoming header) → one JSON object, or ``ProtocolError``
    (``bad_frame``): the one JSON parser at every edge where a client sends JSON.

    Stricter than ``json.loads`` in what a hostile client could use: only UTF-8 (it
    would guess UTF-16 or -32 from the first bytes), no ``NaN``/``Infinity`` (not JSON;
    they would reach the session as numbers that compare false with everything), and
    at most ``MAX_JSON_DEPTH`` levels: CPython's decoder recurses once a level, so
    20,000 levels raise ``RecursionError``, which no caller expects.
    """
    if len(data) > max_bytes:
        raise ProtocolError(ErrorCode.BAD_FRAME, f"the JSON is larger than {max_bytes} bytes")
    try:
        obj = json.loads(data.decode("utf-8"), parse_constant=_not_json)
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError(ErrorCode.BAD_FRAME, "not JSON in UTF-8") from None
    except RecursionError:
        raise ProtocolError(ErrorCode.BAD_FRAME, f"the JSON nests deeper than {MAX_JSON_DEPTH} levels") from None
    if not isinstance(obj, dict):
        raise ProtocolError(ErrorCode.BAD_FRAME, "the JSON must be an object")
    if _too_deep(obj, MAX_JSON_DEPTH):
        raise ProtocolError(ErrorCode.BAD_FRAME, f"the JSON nests deeper than {MAX_JSON_DEPTH} levels")
    return obj


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _too_deep(obj: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` levels (iteratively: no recursion)."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _type_ok(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False
    return isinstance(value, types)


def decode_client(data: bytes, *, max_bytes: int = 65536) -> ClientMessage:
    """Bytes of a binary frame → a client message, or ``ProtocolError``."""
    obj = _unpack(data, max_bytes)
    cls = CLIENT_TYPES.get(obj["type"])
    if cls is None:
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"unknown message type {obj['type'][:40]!r}")
    raw_id = obj.get("id")
    msg_id = raw_id if isinstance(raw_id, str) else None
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in obj or obj[f.name] is None:
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required:
                raise ProtocolError(ErrorCode.MISSING_FIELD, f"{cls.TYPE} needs field '{f.name}'", msg_id)
            continue
        value = obj[f.name]
        _check_type(cls, f.name, value, msg_id)
        kwargs[f.name] = float(value) if f.name in ("speed", "not_before", "play_at") else value
    msg = cls(**kwargs)
    _check_values(msg, msg_id)
    return msg


def check(msg: ClientMessage) -> None:
    """Raise ``ProtocolError`` for a message made in this process (``rtts say``, ``/tts``)
    that ``decode_client`` would have refused: one set of checks, without encoding it."""
    raw_id = getattr(msg, "id", None)
    msg_id = raw_id if isinstance(raw_id, str) else None
    for f in dataclasses.fields(msg):
        value = getattr(msg, f.name)
        if value is not None:
            _check_type(type(msg), f.name, value, msg_id)
    _check_values(msg, msg_id)


def _check_type(cls: type, name: str, value: Any, msg_id: str | None) -> None:
    if name == "t":  # ping's token is echoed back verbatim, so it must be a scalar
        if not isinstance(value, _SCALAR):
            raise ProtocolError(ErrorCode.BAD_MESSAGE, "ping 't' must be a number or string")
    elif not _type_ok(value, _FIELD_TYPES[name]):
        want = "/".join(t.__name__ for t in _FIELD_TYPES[name])
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE, f"{cls.TYPE}.{name} must be {want}, not {type(value).__name__}", msg_id  # type: ignore[attr-defined]
        )
    elif isinstance(value, str) and _LONE_SURROGATE.search(value):
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE, f"{cls.TYPE}.{name} is not valid Unicode (a lone surrogate)", msg_id  # type: ignore[attr-defined]
        )
    elif isinstance(value, str) and (control := _CONTROL.search(value)):
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE,
            f"{cls.TYPE}.{name} holds a control character (U+{ord(control[0]):04X} at {control.start()})",  # type: ignore[attr-defined]
            msg_id,
        )


def finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _check_values(msg: ClientMessage, msg_id: str | None) -> None:
    def bad(text: str) -> ProtocolError:
        return ProtocolError(ErrorCode.BAD_MESSAGE, text, msg_id)

    if isinstance(msg, (Speak, Append, Flush, Cancel)) and msg.id is not None:
        if not 0 < len(msg.id) <= MAX_ID_CHARS:
            raise bad(f"id must be 1..{MAX_ID_CHARS} characters")
    channel = getattr(msg, "channel", None)
    if channel is not None and not CHANNEL_NAME.fullmatch(channel):
        raise bad(f"channel must be 1..{MAX_CHANNEL_CHARS} letters, digits, '.', '_' or '-'")
    if isinstance(msg, Subscribe) and msg.after is not None and msg.after < 0:
        raise bad("after must be >= 0")
    if isinstance(msg, Subscribe) and msg.ahead_ms is not None and not 0 <= msg.ahead_ms <= MAX_AHEAD_MS:
        raise bad(f"ahead_ms must be 0..{MAX_AHEAD_MS}")
    if isinstance(msg, Publish) and msg.priority not in PRIORITIES:
        raise bad(f"priority must be one of {', '.join(PRIORITIES)}")
    if isinstance(msg, Publish) and msg.not_before is not None and not finite(msg.not_before):
        raise bad("not_before must be a finite Unix time in seconds")
    if isinstance(msg, Publish) and msg.play_at is not None and not finite(msg.play_at):
        raise bad("play_at must be a finite Unix time in seconds")
    speed = getattr(msg, "speed", None)
    if speed is not None and not (finite(speed) and SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]):
        raise bad(f"speed must be within {SPEED_RANGE[0]}..{SPEED_RANGE[1]}")
    if isinstance(msg, Hello):
        if msg.v != VERSION:
            raise bad(f"this server speaks protocol v{VERSION}, not v{msg.v}")
        if msg.format is not None and msg.format not in FORMATS:
            raise bad(f"format must be one of {', '.join(FORMATS)}")
        if msg.sample_rate is not None and msg.sample_rate not in SAMPLE_RATES:
            raise bad(f"sample_rate must be one of {', '.join(map(str, SAMPLE_RATES))}")
        if msg.frame_ms is not None and not FRAME_MS_RANGE[0] <= msg.frame_ms <= FRAME_MS_RANGE[1]:
            raise bad(f"frame_ms must be within {FRAME_MS_RANGE[0]}..{FRAME_MS_RANGE[1]}")
    words = getattr(msg, "words", None)
    if isinstance(words, str) and words not in WORD_UNITS:
        raise bad(f"words must be true, false or one of {', '.join(WORD_UNITS)}")
    generator = getattr(msg, "generator", None)
    if generator is not None and generator not in GENERATORS:
        raise bad(f"generator must be one of {', '.join(GENERATORS)}")


def check_not_before(not_before: float | None, now: float, name: str = "not_before") -> None:
    """Refuse a ``publish.not_before`` (or ``play_at``, ``name``) past ``MAX_NOT_BEFORE_AHEAD_S``
    from ``now`` (Unix time): it needs the clock, so it is not part of ``check``; a past one
    means "now"."""
    if not_before is None:
        return
    if not finite(not_before) or not_before > now + MAX_NOT_BEFORE_AHEAD_S:
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE,
            f"{name} must be a Unix time in seconds at most {MAX_NOT_BEFORE_AHEAD_S / 3600:g} h ahead",
        )


def decode_server(data: bytes) -> ServerMessage:
    """Bytes from a server → a message object; for clients, tests and benchmarks.

    Trusts the server: fields it does not know are dropped, so older clients keep
    decoding messages that gained fields.
    """
    obj = msgpack.unpackb(data, raw=False)
    cls = SERVER_TYPES[obj["type"]]
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in obj.items() if k in names})
