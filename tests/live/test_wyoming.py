"""The Wyoming server, driven by the ``wyoming`` package's own async TCP client (as Home
Assistant drives it), against the real server with real voices."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from rtts import protocol, tokens
from rtts.sound import audio
from tests.conftest import Client, ServerThread, make_config
from tests.live.test_http import server_send_buffer
from tests.live.test_server import KOKORO, PIPER, fetch, is_speech

pytestmark = pytest.mark.slow

TOKEN = "wyoming-test-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    with ServerThread(make_config(tmp_path_factory.mktemp("wy"), wyoming_port=0)) as srv:
        yield srv


def client(srv: ServerThread) -> AsyncTcpClient:
    assert srv.server is not None and srv.server.wyoming is not None
    return AsyncTcpClient("127.0.0.1", srv.server.wyoming.port)


async def read(c: AsyncTcpClient, timeout: float = 120) -> Event:
    event = await asyncio.wait_for(c.read_event(), timeout)
    assert event is not None, "the server closed the connection"
    return event


async def audio_until(c: AsyncTcpClient, last: str) -> tuple[list[Event], np.ndarray]:
    """Events up to and including the first of type ``last``, and the audio they carried."""
    events: list[Event] = []
    while True:
        event = await read(c)
        events.append(event)
        if event.type == last:
            break
    pcm = b"".join(AudioChunk.from_event(e).audio for e in events if AudioChunk.is_type(e.type))
    return events, audio.decode(pcm, "pcm16")


async def test_describe_lists_every_voice_with_its_languages_and_streaming(server: ServerThread) -> None:
    async with client(server) as c:
        await c.write_event(Describe().event())
        info = Info.from_event(await read(c))
    [program] = info.tts
    assert program.supports_synthesize_streaming
    assert program.installed and program.version
    voices = {v.name: v for v in program.voices}
    listed = json.loads(fetch(server.http + "/voices")[2])
    assert set(voices) == {v["id"] for v in listed}
    for v in listed:
        assert voices[v["id"]].languages == v["langs"]
    assert voices[PIPER].languages == ["en"]
    assert {"ja", "zh"} <= set(voices[KOKORO].languages)


@pytest.mark.parametrize("voice", [PIPER, KOKORO])
async def test_synthesize_gives_audio_start_chunks_stop(server: ServerThread, voice: str) -> None:
    text = "Hello from Home Assistant. The kitchen lights are now off."
    async with client(server) as c:
        await c.write_event(Synthesize(text=text, voice=SynthesizeVoice(name=voice)).event())
        events, samples = await audio_until(c, AudioStop().event().type)
    start = AudioStart.from_event(events[0])
    assert (start.rate, start.width, start.channels) == (24000, 2, 1)
    chunks = [AudioChunk.from_event(e) for e in events if AudioChunk.is_type(e.type)]
    assert len(chunks) == len(events) - 2, [e.type for e in events]
    assert all(c.rate == 24000 and c.width == 2 and c.channels == 1 for c in chunks)
    assert all(len(c.audio) == 2400 * 2 for c in chunks[:-1])  # 100 ms each
    stamps = [c.timestamp for c in chunks]
    assert stamps == sorted(stamps) and stamps[0] == 0
    is_speech(samples, 24000, text)


async def test_language_alone_picks_that_languages_voice(server: ServerThread) -> None:
    async with client(server) as c:
        await c.write_event(Synthesize(text="今日は晴れです。", voice=SynthesizeVoice(language="ja_JP")).event())
        _, samples = await audio_until(c, AudioStop().event().type)
    assert float(np.sqrt(np.mean(samples**2))) > 0.01 and len(samples) > 24000 // 2


async def test_streamed_text_is_spoken_as_clauses_complete(server: ServerThread) -> None:
    """Home Assistant feeding an LLM's answer: audio starts before the text has ended, one
    audio stream for the whole answer, then synthesize-stopped; the compatibility
    ``synthesize`` inside the stream is not spoken a second time."""
    pieces = ["Sure, the weather", " today is sunny", " and warm, with a high", " of twenty", " degrees. Have", " a nice day!"]
    async with client(server) as c:
        await c.write_event(SynthesizeStart(voice=SynthesizeVoice(name=PIPER)).event())
        for piece in pieces[:4]:
            await c.write_event(SynthesizeChunk(text=piece).event())
        first = await read(c)  # the first clause is complete ("Sure, the weather today is sunny and warm,")
        assert AudioStart.is_type(first.type), first
        for piece in pieces[4:]:
            await c.write_event(SynthesizeChunk(text=piece).event())
        await c.write_event(Synthesize(text="".join(pieces), voice=SynthesizeVoice(name=PIPER)).event())
        await c.write_event(SynthesizeStop().event())
        events, samples = await audio_until(c, SynthesizeStopped().event().type)
        types = [e.type for e in events]
        assert types.count("audio-start") == 0 and types.count("audio-stop") == 1
        assert types[-2:] == ["audio-stop", "synthesize-stopped"]
        is_speech(samples, 24000, "".join(pieces))
        # The connection goes on: another stream on it.
        await c.write_event(SynthesizeStart().event())
        await c.write_event(SynthesizeChunk(text="Done.").event())
        await c.write_event(SynthesizeStop().event())
        events, samples = await audio_until(c, SynthesizeStopped().event().type)
        assert [e.type for e in events][0] == "audio-start" and len(samples) > 2400


async def test_errors_carry_rtts_codes_and_the_connection_stays(server: ServerThread) -> None:
    async with client(server) as c:
        await c.write_event(Synthesize(text="Hi.", voice=SynthesizeVoice(name="nope/nothing")).event())
        err = Error.from_event(await read(c))
        assert (err.code, err.text) == ("unknown_voice", "no voice 'nope/nothing'; see describe (info.tts)")
        await c.write_event(Synthesize(text="안녕하세요").event())
        written = Error.from_event(await read(c))
        await c.write_event(Synthesize(text="Hi.", voice=SynthesizeVoice(language="ko_KR")).event())
        named = Error.from_event(await read(c))
        # Issue 30: one wording, whether the language is asked for or written.
        assert written.code == named.code == "unsupported_language" and written.text == named.text
        await c.write_event(Synthesize(text="x" * 6000).event())
        assert Error.from_event(await read(c)).code == "text_too_long"
        await c.write_event(SynthesizeChunk(text="stray").event())
        assert Error.from_event(await read(c)).code == "bad_message"
        await c.write_event(SynthesizeStart(voice=SynthesizeVoice(name="nope")).event())
        await c.write_event(SynthesizeChunk(text="Hello there.").event())
        assert Error.from_event(await read(c)).code == "unknown_voice"
        await c.write_event(SynthesizeStop().event())
        assert SynthesizeStopped.is_type((await read(c)).type)
        await c.write_event(Describe().event())
        assert Info.is_type((await read(c)).type)


async def test_a_declared_length_over_the_limit_is_refused_without_reading_it(server: ServerThread) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.server.wyoming.port)  # type: ignore[union-attr]
    writer.write(json.dumps({"type": "synthesize", "payload_length": 2**31}).encode() + b"\n")
    await writer.drain()
    header = json.loads(await asyncio.wait_for(reader.readline(), 30))
    assert header["type"] == "error"
    data = json.loads(await reader.readexactly(header["data_length"]))
    assert data["code"] == "bad_frame" and "0..65536 bytes" in data["text"]
    assert await asyncio.wait_for(reader.read(), 30) == b""  # then closed: the framing is lost
    writer.close()
    await writer.wait_closed()


async def test_wyoming_clients_count_for_the_idle_unload_only_while_served(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 20, bug 3: an open Wyoming connection kept the models loaded forever, though it
    asked for nothing. A request counts as activity; an idle connection does not."""
    with ServerThread(make_config(tmp_path, wyoming_port=0, idle_unload=1.0, wyoming_idle_timeout=60.0)) as srv:
        async with client(srv) as c:
            await c.write_event(SynthesizeStart(voice=SynthesizeVoice(name=PIPER)).event())
            await c.write_event(Describe().event())
            await read(c)  # the start has been taken
            assert srv.service.active == 1 and srv.server.caps.total == 1  # type: ignore[union-attr]
            await c.write_event(SynthesizeChunk(text="Before unload.").event())
            await c.write_event(SynthesizeStop().event())
            await audio_until(c, SynthesizeStopped().event().type)
            assert srv.service.active == 0 and srv.server.caps.total == 0  # type: ignore[union-attr]
            deadline = time.monotonic() + 20
            while srv.service.loaded_voices() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert srv.service.loaded_voices() == []  # unloaded with the client still connected
            await c.write_event(Synthesize(text="After unload.", voice=SynthesizeVoice(name=PIPER)).event())
            _, samples = await audio_until(c, AudioStop().event().type)  # and it loads again for it
            is_speech(samples, 24000, "After unload.")
        deadline = time.monotonic() + 10
        while srv.service.active and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert srv.service.active == 0


def _token_server(tmp: Path, **kw: object) -> ServerThread:
    cfg = dict(wyoming_port=0, token=TOKEN, max_connections=8, max_connections_per_ip=4, max_handshakes=8,
               handshake_timeout=2.0, wyoming_idle_timeout=4.0)
    return ServerThread(make_config(tmp, **{**cfg, **kw}))


async def _closed(reader: asyncio.StreamReader, timeout: float) -> bool:
    """Whether the server closes the connection within ``timeout`` (what it sent before is skipped)."""
    try:
        async with asyncio.timeout(timeout):
            while await reader.read(65536):
                pass
        return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False


async def test_idle_wyoming_sockets_lock_nobody_out(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 20, bug 3: idle Wyoming sockets each took a connection slot before sending
    anything and kept it forever (no read timeout): 16 from one address made that address's
    WebSocket and HTTP clients get 429, and with --token 8 made authorized clients get 503.
    Now a socket that is not being served waits in the handshake gate: bounded in number
    (the newcomer closes the oldest), timed out, and holding no slot."""
    with _token_server(tmp_path) as srv:
        assert srv.server is not None and srv.server.wyoming is not None
        port = srv.server.wyoming.port
        silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(16)]
        said_hello = [await asyncio.open_connection("127.0.0.1", port) for _ in range(4)]
        for reader, writer in said_hello:  # a valid first event, then nothing more
            writer.write(json.dumps({"type": "describe"}).encode() + b"\n")
            await writer.drain()
            assert Info.is_type(json.loads(await asyncio.wait_for(reader.readline(), 30))["type"])
        assert srv.server.caps.total == 0 and len(srv.server.waiting) <= srv.config.max_handshakes
        # The 12 oldest silent ones were closed at once to make room (16 + 4 > 8 places).
        assert sum([await _closed(r, 1.0) for r, _ in silent[:12]]) == 12
        # An authorized WebSocket, and /tts, from the same address are served.
        with Client(srv.url, subprotocols=["rtts.v1", tokens.encode_token(TOKEN)]) as ws:
            assert isinstance(ws.recv(), protocol.Ready)
            status, _, _ = await asyncio.to_thread(fetch, srv.http + f"/tts?text=Hi.&token={TOKEN}&voice={PIPER}")
            assert status == 200
        assert (await asyncio.to_thread(fetch, srv.http + "/readyz"))[0] == 200
        # The rest go within their timeouts: the silent ones the handshake timeout (2 s),
        # those that spoke once the idle timeout (4 s).
        assert all([await _closed(r, srv.config.handshake_timeout + 2) for r, _ in silent[12:]])
        assert all([await _closed(r, srv.config.wyoming_idle_timeout + 2) for r, _ in said_hello])
        assert len(srv.server.waiting) == 0
        for _, writer in silent + said_hello:
            writer.close()


async def test_a_request_takes_a_slot_and_refuses_busy_when_there_is_none(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with _token_server(tmp_path, max_connections_per_ip=1) as srv:
        with Client(srv.url, subprotocols=["rtts.v1", tokens.encode_token(TOKEN)]) as ws:
            assert isinstance(ws.recv(), protocol.Ready)  # the address's one slot
            async with client(srv) as c:
                await c.write_event(Synthesize(text="Hi.", voice=SynthesizeVoice(name=PIPER)).event())
                assert Error.from_event(await read(c)).code == "busy"
                await c.write_event(Describe().event())  # the connection stays
                assert Info.is_type((await read(c)).type)
        deadline = time.monotonic() + 10
        while srv.server.caps.total and time.monotonic() < deadline:  # type: ignore[union-attr]
            await asyncio.sleep(0.05)  # the WebSocket's handler ends a moment after its close
        async with client(srv) as c:  # the slot is free again
            await c.write_event(Synthesize(text="Now there is room.", voice=SynthesizeVoice(name=PIPER)).event())
            _, samples = await audio_until(c, AudioStop().event().type)
            assert len(samples) > 2400
            deadline = time.monotonic() + 10
            while srv.server.caps.total and time.monotonic() < deadline:  # type: ignore[union-attr]
                await asyncio.sleep(0.05)  # the slot is given back as the audio-stop goes out
            assert srv.server.caps.total == 0  # type: ignore[union-attr]  # the connection open, idle


@pytest.mark.parametrize("where", ["header", "data"])
async def test_deeply_nested_json_is_a_bad_frame(server: ServerThread, where: str, caplog) -> None:  # type: ignore[no-untyped-def]
    """Issue 20, bug 11: 20,000 levels of JSON raised RecursionError in the event reader:
    "Unhandled exception in client_connected_cb" and the connection dropped unanswered."""
    nested = "[" * 20000 + "]" * 20000
    reader, writer = await asyncio.open_connection("127.0.0.1", server.server.wyoming.port)  # type: ignore[union-attr]
    if where == "header":
        writer.write(b'{"type": "synthesize", "data": {"text": ' + nested.encode() + b"}}\n")
    else:
        data = b'{"text": ' + nested.encode() + b"}"
        writer.write(json.dumps({"type": "synthesize", "data_length": len(data)}).encode() + b"\n" + data)
    await writer.drain()
    header = json.loads(await asyncio.wait_for(reader.readline(), 30))
    assert header["type"] == "error"
    error = json.loads(await reader.readexactly(header["data_length"]))
    assert error["code"] == "bad_frame" and "deeper than" in error["text"]
    assert await _closed(reader, 30)
    writer.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_malformed_event_data_is_a_bad_message(server: ServerThread, caplog) -> None:  # type: ignore[no-untyped-def]
    """The wyoming package's from_event trusts the data's shapes: a number for a voice raised
    TypeError out of the connection ("Unhandled exception in client_connected_cb")."""
    async with client(server) as c:
        await c.write_event(Event(type="synthesize-start", data={"voice": 5}))
        assert Error.from_event(await read(c)).code == "bad_message"
        await c.write_event(Describe().event())
        assert Info.is_type((await read(c)).type)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("when", ["idle", "speaking"])
async def test_a_client_that_resets_logs_no_error(server: ServerThread, when: str, caplog) -> None:  # type: ignore[no-untyped-def]
    """Issue 20, bug 12: a reset logged an ERROR with a ConnectionResetError traceback."""
    caplog.set_level(logging.INFO)
    sock = socket.create_connection(("127.0.0.1", server.server.wyoming.port))  # type: ignore[union-attr]
    text = "A long answer that is still being spoken when the client resets its connection. " * 4
    sock.sendall(json.dumps({"type": "synthesize", "data": {"text": text, "voice": {"name": PIPER}}}).encode() + b"\n"
                 if when == "speaking" else json.dumps({"type": "describe"}).encode() + b"\n")
    assert sock.recv(100)  # the server is at work (audio-start, or the info)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # RST
    deadline = time.monotonic() + 10
    while server.server.caps.total and time.monotonic() < deadline:  # type: ignore[union-attr]
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    assert server.server.caps.total == 0  # type: ignore[union-attr]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]


async def test_wyoming_sockets_get_the_kernel_send_buffer_cap(server: ServerThread) -> None:
    """Issue 20, bug 14: only WebSockets had SO_SNDBUF capped; a Wyoming client that does not
    read had ~4 MB (80 s of audio) queued in the kernel before back-pressure started."""
    sock = socket.create_connection(("127.0.0.1", server.server.wyoming.port))  # type: ignore[union-attr]
    try:
        expected = 2 * server.config.send_buffer  # what Linux reports for the size rtts sets
        assert await asyncio.to_thread(server_send_buffer, sock, expected) == expected
    finally:
        sock.close()


async def test_a_kokoro_voices_speakers_are_its_generators(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 31's per-request choice, from Home Assistant: describe lists a Kokoro voice's
    generators as its speakers, and a speaker names the one a request speaks with."""
    with ServerThread(make_config(tmp_path, wyoming_port=0, generator="auto", phrase_cache_mb=0)) as srv:
        async with client(srv) as c:
            await c.write_event(Describe().event())
            info = Info.from_event(await read(c))
            voices = {v.name: v for v in info.tts[0].voices}
            assert [s.name for s in voices[KOKORO].speakers or []] == ["student", "teacher"]
            assert not voices[PIPER].speakers
            await c.write_event(Synthesize(text="欢迎光临。", voice=SynthesizeVoice(name=KOKORO, speaker="student")).event())
            _, samples = await audio_until(c, AudioStop().event().type)
            assert len(samples) > 24000 // 2
            parts = json.loads(fetch(srv.http + "/readyz")[2])["memory"]["parts_mb"]
            assert "kokoro:student" in parts, parts  # opened for it: this server speaks the teacher
            await c.write_event(Synthesize(text="你好。", voice=SynthesizeVoice(name=KOKORO, speaker="fast")).event())
            error = Error.from_event(await read(c))
            assert error.code == "bad_message" and "generator" in error.text
