"""The Wyoming server, driven by the ``wyoming`` package's own async TCP client (as Home
Assistant drives it), against the real server with real voices."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import numpy as np
import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped, SynthesizeVoice

from rtts import audio

from tests.conftest import ServerThread, make_config
from tests.live.test_server import KOKORO, PIPER, fetch, is_speech

pytestmark = pytest.mark.slow


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
        assert err.code == "unknown_voice"
        await c.write_event(Synthesize(text="안녕하세요").event())
        assert Error.from_event(await read(c)).code == "unsupported_language"
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


async def test_wyoming_clients_count_for_the_idle_unload(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with ServerThread(make_config(tmp_path, wyoming_port=0, idle_unload=1.0)) as srv:
        async with client(srv) as c:
            await c.write_event(Synthesize(text="Before unload.", voice=SynthesizeVoice(name=PIPER)).event())
            await audio_until(c, AudioStop().event().type)
            assert srv.service.active == 1
            await asyncio.sleep(2.0)  # twice the idle time, with the client still connected
            assert PIPER in srv.service.loaded_voices()
        deadline = time.monotonic() + 20
        while srv.service.loaded_voices() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert srv.service.loaded_voices() == [] and srv.service.active == 0
        async with client(srv) as c:  # and it loads again for the next one
            await c.write_event(Synthesize(text="After unload.", voice=SynthesizeVoice(name=PIPER)).event())
            _, samples = await audio_until(c, AudioStop().event().type)
            is_speech(samples, 24000, "After unload.")
