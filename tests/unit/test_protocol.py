"""Protocol v1 encode/decode on raw bytes: pure, no I/O."""

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtts import protocol
from rtts.protocol import ErrorCode, ProtocolError


def pack(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def code_of(data: bytes, **kw) -> str:
    with pytest.raises(ProtocolError) as info:
        protocol.decode_client(data, **kw)
    return info.value.code.value


def test_speak_round_trip():
    msg = protocol.decode_client(pack({"type": "speak", "id": "a", "text": "Hi.", "speed": 1, "extra": [1]}))
    assert msg == protocol.Speak(id="a", text="Hi.", speed=1.0)
    assert isinstance(msg.speed, float)


def test_encode_omits_none_and_carries_type():
    data = protocol.encode(protocol.Cancel())
    assert msgpack.unpackb(data) == {"type": "cancel"}
    audio = protocol.Audio("u", 3, 1440, b"\x00\x01")
    assert msgpack.unpackb(protocol.encode(audio)) == {"type": "audio", "id": "u", "seq": 3, "pts": 1440, "data": b"\x00\x01"}


def test_every_client_message_round_trips():
    msgs = [
        protocol.Hello(token="t", voice="v", lang="en", speed=1.5, sample_rate=16000, format="mulaw", frame_ms=40,
                       generator="student"),
        protocol.Speak(id="1", text="x", voice="v", lang="en", speed=0.5, interrupt=True, generator="teacher"),
        protocol.Append(id="1", text="x", generator="auto"),
        protocol.Flush(id="1"),
        protocol.Cancel(id="1"),
        protocol.Ping(t=12.5),
        protocol.Subscribe(channel="hall", after=3, ahead_ms=1000),
    ]
    for msg in msgs:
        assert protocol.decode_client(protocol.encode(msg)) == msg


def test_server_messages_decode():
    end = protocol.End("u", "done", {"ttfa_ms": 12.0})
    assert protocol.decode_server(protocol.encode(end)) == end
    # A newer server may add fields; an older client drops them.
    data = pack({"type": "pong", "t": 1, "future": True})
    assert protocol.decode_server(data) == protocol.Pong(1)


@pytest.mark.parametrize(
    "data, code",
    [
        (b"\xc1", "bad_frame"),  # never-used msgpack byte
        (b"", "bad_frame"),
        (pack([1, 2]), "bad_frame"),
        (pack({"type": "speak", "id": "a", "text": "x"}) + b"\x00", "bad_frame"),  # trailing bytes
        (pack({1: "x", "type": "ping"}), "bad_frame"),  # strict_map_key
        (pack({"id": "a"}), "missing_field"),
        (pack({"type": 7}), "missing_field"),
        (pack({"type": "shout"}), "unknown_type"),
        (pack({"type": "speak", "id": "a"}), "missing_field"),
        (pack({"type": "speak", "text": "x"}), "missing_field"),
        (pack({"type": "speak", "id": 5, "text": "x"}), "bad_message"),
        (pack({"type": "speak", "id": "a", "text": b"x"}), "bad_message"),
        (pack({"type": "speak", "id": "a", "text": "x", "speed": "fast"}), "bad_message"),
        (pack({"type": "speak", "id": "a", "text": "x", "speed": True}), "bad_message"),
        (pack({"type": "speak", "id": "a", "text": "x", "speed": 9.0}), "bad_message"),
        (pack({"type": "speak", "id": "a", "text": "x", "interrupt": 1}), "bad_message"),
        (pack({"type": "speak", "id": "a", "text": "x", "generator": "fast"}), "bad_message"),
        (pack({"type": "append", "id": "a", "text": "x", "generator": 1}), "bad_message"),
        (pack({"type": "hello", "generator": ["student"]}), "bad_message"),
        (pack({"type": "speak", "id": "", "text": "x"}), "bad_message"),
        (pack({"type": "hello", "v": 2}), "bad_message"),
        (pack({"type": "hello", "format": "mp3"}), "bad_message"),
        (pack({"type": "hello", "sample_rate": 12345}), "bad_message"),
        (pack({"type": "hello", "frame_ms": 5}), "bad_message"),
        (pack({"type": "ping", "t": [1, 2]}), "bad_message"),
        (pack({"type": "subscribe", "channel": "hall", "ahead_ms": -1}), "bad_message"),
        (pack({"type": "subscribe", "channel": "hall", "ahead_ms": 10_001}), "bad_message"),
        (pack({"type": "subscribe", "channel": "hall", "ahead_ms": 0.5}), "bad_message"),
        (pack({"type": "subscribe", "channel": "hall", "ahead_ms": True}), "bad_message"),
    ],
)
def test_bad_input_gets_a_stable_code(data, code):
    assert code_of(data) == code


def test_error_carries_the_id_when_it_can():
    with pytest.raises(ProtocolError) as info:
        protocol.decode_client(pack({"type": "speak", "id": "abc", "text": 3}))
    assert info.value.id == "abc"


def test_structure_limits_refuse_bombs_cheaply():
    # A map wider than any real message, and a deep array nest: refused by msgpack itself.
    wide = pack({"type": "ping", **{f"k{i}": i for i in range(100)}})
    assert code_of(wide) == "bad_frame"
    nest = b"\x91" * 2000 + b"\x00"
    assert code_of(nest) == "bad_frame"
    # An array32 header claiming 2**31 items inside a tiny message must not allocate.
    assert code_of(b"\x81\xa4type\xdd\x7f\xff\xff\xff") == "bad_frame"


def test_oversized_message_refused():
    big = pack({"type": "speak", "id": "a", "text": "x" * 5000})
    assert code_of(big, max_bytes=1000) == "bad_frame"


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_escape_as_other_exceptions(data):
    try:
        protocol.decode_client(data)
    except ProtocolError as exc:
        assert exc.code in ErrorCode


scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=20) | st.binary(max_size=20)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=10)
fields = st.sampled_from(["type", "id", "text", "voice", "lang", "speed", "v", "t", "interrupt", "format", "frame_ms", "sample_rate", "token"])


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(fields, values | st.sampled_from(list(protocol.CLIENT_TYPES)), max_size=8))
def test_random_maps_decode_or_raise_protocol_error(obj):
    try:
        msg = protocol.decode_client(pack(obj))
    except ProtocolError as exc:
        assert exc.code in ErrorCode
    else:
        assert type(msg).TYPE == obj["type"]


@pytest.mark.parametrize(
    "msg",
    [
        protocol.Speak(id="a", text="hi", speed=9.0),
        protocol.Speak(id="", text="hi"),
        protocol.Speak(id="a", text="hi", voice=3),  # type: ignore[arg-type]
        protocol.Speak(id="a", text="hi", generator="Student"),
        protocol.Hello(format="wav"),
        protocol.Hello(v=2),
        protocol.Hello(sample_rate=12345),
        protocol.Append(id="a", text=b"bytes"),  # type: ignore[arg-type]
        protocol.Ping(t=[1]),
        protocol.Subscribe(channel="hall", ahead_ms=-5),
    ],
)
def test_check_refuses_in_process_what_decoding_refuses_on_the_wire(msg) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(protocol.ProtocolError) as wire:
        protocol.decode_client(protocol.encode(msg))
    with pytest.raises(protocol.ProtocolError) as local:
        protocol.check(msg)
    assert (local.value.code, local.value.message) == (wire.value.code, wire.value.message)


@pytest.mark.parametrize("char", [chr(c) for c in range(0x20) if chr(c) not in "\t\n\r"])
def test_a_control_character_is_refused_in_every_message_on_the_wire_and_in_process(char: str) -> None:
    """Issue 30, bug 2: a NUL in the text reached the g2p tables (C code ends a key there)
    and Hibari answered engine_unavailable on every route; the other C0 controls are as
    useless in text. Refused at the edge like a lone surrogate, whatever the str field."""
    for msg in (protocol.Speak(id="u", text=f"ab{char}cd efg"), protocol.Append(id="u", text=char),
                protocol.Publish(channel="lobby", text=f"Hi{char}."), protocol.Hello(voice=f"x{char}"),
                protocol.Speak(id=f"u{char}", text="Hi.")):
        with pytest.raises(ProtocolError) as wire:
            protocol.decode_client(protocol.encode(msg))
        with pytest.raises(ProtocolError) as local:
            protocol.check(msg)
        assert local.value.code == wire.value.code == ErrorCode.BAD_MESSAGE
        assert f"U+{ord(char):04X}" in local.value.message and local.value.message == wire.value.message


def test_tab_newline_and_carriage_return_are_text() -> None:
    msg = protocol.Speak(id="u", text="One,\ttwo.\r\nThree.\n\nFour \x7f\x85\u2028five.")
    protocol.check(msg)
    assert protocol.decode_client(protocol.encode(msg)) == msg


def test_check_passes_what_decoding_passes() -> None:
    for msg in (protocol.Speak(id="a", text="hi", speed=1.5), protocol.Hello(sample_rate=16000), protocol.Ping(t=3)):
        protocol.check(msg)
        assert protocol.decode_client(protocol.encode(msg)) == msg


def test_the_fields_of_playing_in_step_round_trip_and_are_absent_when_unset():
    """docs/protocol.md "Playing in step": optional fields, so a message without them is the
    same bytes as before they existed, and an older client drops them."""
    pong = protocol.Pong(7, server_time=1_800_000_000.125)
    start = protocol.Start("lobby#3", "piper/a", 24000, "pcm16", channel="lobby", play_at=1_800_000_001.5)
    assert protocol.decode_server(protocol.encode(pong)) == pong
    assert protocol.decode_server(protocol.encode(start)) == start
    assert protocol.encode(protocol.Pong(7)) == pack({"type": "pong", "t": 7})
    assert protocol.encode(protocol.Start("a", "piper/a", 24000, "pcm16")) == pack(
        {"type": "start", "id": "a", "voice": "piper/a", "sample_rate": 24000, "format": "pcm16"}
    )
    ready = protocol.Ready("s1", 24000, "pcm16", 20, [], "piper/a", [], {}, clock={"source": "bus", "max_lead_ms": 2000})
    assert protocol.decode_server(protocol.encode(ready)).clock == {"source": "bus", "max_lead_ms": 2000}
    # A ping's t comes back as it was sent, whatever the server adds.
    assert protocol.decode_client(pack({"type": "ping", "t": 1234.5, "server_time": 1})) == protocol.Ping(1234.5)
