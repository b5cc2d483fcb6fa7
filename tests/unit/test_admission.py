"""Sharing the one inference thread, without it: admission control, the phrase cache and
when a job may yield (the live side is tests/live/test_scheduling.py)."""

from __future__ import annotations

from pathlib import Path

import msgpack
import numpy as np
import pytest

from rtts import protocol
from rtts.config import Config
from rtts.engines.base import VoiceInfo
from rtts.engines.voices import routes
from rtts.speech.effects import Close, Send, Submit
from rtts.speech.session import Session
from rtts.synthesis.inference import YIELD_GUARD_S, can_yield
from rtts.synthesis.jobs import Estimate, Job
from rtts.synthesis.phrase_cache import PhraseCache
from tests.catalogs import FixedCatalog

# ---------------------------------------------------------------- phrase cache


def test_phrase_cache_is_bounded_and_counts() -> None:
    second = np.ones(1000, np.float32)  # 4000 bytes
    cache = PhraseCache(max_bytes=10_000, max_chars=20)
    keys = [PhraseCache.key("v", "en", 1.0, f"text {i}") for i in range(3)]
    assert cache.get(keys[0]) is None
    cache.put(keys[0], [second])
    cache.put(keys[1], [second])
    assert cache.get(keys[0]) is not None  # now the most recently used
    cache.put(keys[2], [second])  # 12 000 bytes > 10 000: the least recently used goes
    assert cache.peek(keys[0]) and cache.peek(keys[2]) and not cache.peek(keys[1])
    assert cache.size_bytes == 8000 and len(cache) == 2
    assert (cache.hits, cache.misses) == (1, 1)
    got = cache.get(keys[0])
    assert got is not None and not got[0].flags.writeable  # replays cannot corrupt the entry
    assert cache.cacheable("short") and not cache.cacheable("x" * 21)
    assert not PhraseCache(0).cacheable("short")
    # Speed is part of the key: the same text faster is other audio.
    assert PhraseCache.key("v", "en", 1.0, "a") != PhraseCache.key("v", "en", 1.5, "a")
    # So is being an announcement's: a private stream's may have been cut into runs by this
    # box's load, and every instance must make an announcement alike.
    assert PhraseCache.key("v", "en", 1.0, "a") != PhraseCache.key("v", "en", 1.0, "a", shared=True)


# ---------------------------------------------------------------- admission control

VOICE = VoiceInfo("piper/a", "A", ("en",), "piper", 22050, "piper/a")


class BusyCatalog(FixedCatalog):
    """A catalog whose inference thread reports a given wait and load."""

    def __init__(self, wait: float, load: float) -> None:
        super().__init__({"piper/a": VOICE}, "piper/a", loaded=["piper/a"])
        self.answer = Estimate(wait, load, wait + 0.1)
        self.asked: list[Job] = []
        self.rooms: list[float | None] = []

    def estimate(self, job: Job, room: float | None = None) -> Estimate:
        self.asked.append(job)
        self.rooms.append(room)
        return self.answer


def _session(catalog: BusyCatalog, **config) -> Session:
    cfg = Config(cache_dir=Path("/tmp/rtts-test"), models_dir=Path("/tmp/rtts-test"), **config)
    return Session("s1", cfg, catalog, lambda: 50.0)


def _speak(session: Session, utt_id: str = "u") -> list:
    return session.receive(msgpack.packb({"type": "speak", "id": utt_id, "text": "Hello there. Again."}))


def test_start_carries_the_expected_wait() -> None:
    catalog = BusyCatalog(wait=0.35, load=0.4)
    effects = _speak(_session(catalog))
    start = [e.message for e in effects if isinstance(e, Send) and isinstance(e.message, protocol.Start)]
    assert start and start[0].expected_wait_ms == 350 and start[0].expected_audio_ms == 450
    assert catalog.asked[0].text == "Hello there." and any(isinstance(e, Submit) for e in effects)
    decoded = protocol.decode_server(protocol.encode(start[0]))
    assert decoded == start[0]


@pytest.mark.parametrize(("wait", "load"), [(5.0, 0.5), (0.1, 1.4)])
def test_queue_policy_accepts_a_late_utterance(wait: float, load: float) -> None:
    effects = _speak(_session(BusyCatalog(wait, load), admission="queue"))
    jobs = [e.job for e in effects if isinstance(e, Submit)]
    start = next(e.message for e in effects if isinstance(e, Send) and isinstance(e.message, protocol.Start))
    # Late by its wait alone: it is not queued (the worker lets it in once the streams
    # there hold audio for it, room.crowd_ready). Over the load: it waits for room on the
    # thread (issue 32), and its start says so. Either way it goes in under the bound.
    default = Config.admission_max_load  # 0.7 (docs/benchmarks.md, "Let in between two runs")
    over = load > default
    assert len(jobs) == 1 and jobs[0].room == default
    assert start.queued is (True if over else None)
    assert protocol.decode_server(protocol.encode(start)) == start
    # The worker was asked with the room (the wait a queued stream is told counts its wait
    # for room), and told what the stream says after its first unit.
    assert session_rooms(load) == [default]


def session_rooms(load: float) -> list[float | None]:
    catalog = BusyCatalog(0.1, load)
    _speak(_session(catalog, admission="queue"))
    assert catalog.asked[0].text == "Hello there." and catalog.asked[0].rest_chars == len("Again.")
    return catalog.rooms


def test_only_a_stream_that_may_wait_is_asked_about_room() -> None:
    refusing = BusyCatalog(0.1, 0.5)
    _speak(_session(refusing, admission="refuse"))
    assert refusing.rooms == [None]


@pytest.mark.parametrize(("wait", "load"), [(5.0, 0.5), (0.1, 1.4)])
def test_refuse_policy_answers_busy_and_keeps_the_connection(wait: float, load: float) -> None:
    session = _session(BusyCatalog(wait, load), admission="refuse", admission_max_wait=2.0)
    effects = _speak(session)
    errors = [e.message for e in effects if isinstance(e, Send)]
    assert [(m.code, m.id) for m in errors] == [("busy", "u")]
    assert not any(isinstance(e, (Submit, Close)) for e in effects)
    assert not session.utterances  # nothing left half-started; the id may be reused
    session._catalog.answer = Estimate(0.0, 0.2, 0.1)  # type: ignore[attr-defined]
    assert any(isinstance(e, Submit) for e in _speak(session))


def test_the_load_that_counts_as_late_is_the_operators() -> None:
    # Issue 32: a burst of Kokoro listeners underran at a load of 0.5-0.7; a site may
    # rather refuse the third listener than let every one of them stutter.
    strict = _session(BusyCatalog(0.1, 0.57), admission="refuse", admission_max_load=0.45)
    assert [e.message.code for e in _speak(strict) if isinstance(e, Send)] == ["busy"]
    assert any(isinstance(e, Submit) for e in _speak(_session(BusyCatalog(0.1, 0.57), admission="refuse")))
    assert any(isinstance(e, Submit) for e in _speak(_session(BusyCatalog(0.1, 0.38), admission="refuse",
                                                              admission_max_load=0.45)))
    with pytest.raises(ValueError, match="admission-max-load"):
        Config(cache_dir=Path("/tmp/rtts-test"), models_dir=Path("/tmp/rtts-test"), admission_max_load=0)


def test_close_policy_closes_with_1013() -> None:
    effects = _speak(_session(BusyCatalog(9.0, 0.5), admission="close"))
    closes = [e for e in effects if isinstance(e, Close)]
    assert closes and closes[0].code == protocol.CloseCode.OVERLOADED == 1013


def test_in_time_utterances_pass_every_policy() -> None:
    for policy in ("queue", "refuse", "close"):
        assert any(isinstance(e, Submit) for e in _speak(_session(BusyCatalog(0.5, 0.6), admission=policy)))


# ---------------------------------------------------------------- the worker with a real voice


def test_a_job_yields_only_with_enough_audio_in_hand() -> None:
    # Nothing ahead: a little more than its own next chunk and the guard is enough.
    assert can_yield(0.2 + YIELD_GUARD_S, [], 0.1)
    assert not can_yield(0.05 + YIELD_GUARD_S, [], 0.1)
    # Seven newcomers' first chunks (50 ms each) outlast a first window of 116 ms.
    assert not can_yield(0.116, [0.05] * 7, 0.02)
    assert can_yield(1.0, [0.05] * 7, 0.1)


def test_a_streams_last_unit_is_marked_and_an_open_append_never_is() -> None:
    """The worker takes a stream off the thread as its last unit ends (``Job.last``), and
    counts it there for a moment after any other (its next unit is on its way)."""
    from rtts.synthesis.jobs import JobDone

    session = _session(BusyCatalog(0.0, 0.2))
    jobs = [e.job for e in _speak(session) if isinstance(e, Submit)]  # "Hello there. Again."
    assert [j.last for j in jobs] == [False]
    jobs += [e.job for e in session.job_event(jobs[0], JobDone(0.01)) if isinstance(e, Submit)]
    assert [(j.text, j.last) for j in jobs] == [("Hello there.", False), ("Again.", True)]
    # Text still coming (append, no flush): no unit is its last.
    streaming = _session(BusyCatalog(0.0, 0.2))
    effects = streaming.receive(msgpack.packb({"type": "append", "id": "llm", "text": "First sentence. Then more"}))
    appended = [e.job for e in effects if isinstance(e, Submit)]
    assert [(j.text, j.last) for j in appended] == [("First sentence.", False)]


def test_an_open_append_stream_counts_what_the_last_ones_came_to() -> None:
    """Issue 32: a stream waiting for room is told its first audio by what the streams
    ahead still have to say. An ``append`` stream has sent little of its answer when the
    next one asks: it counts the text it holds and what the ``append`` streams before it
    came to (their median, ``AppendLengths``), never less than it has sent."""
    from rtts.speech.append_lengths import AppendLengths

    lengths = AppendLengths()
    cfg = Config(cache_dir=Path("/tmp/rtts-test"), models_dir=Path("/tmp/rtts-test"))
    catalog = BusyCatalog(0.0, 0.2)

    def opened(utt_id: str, text: str) -> Job:
        session = Session("s", cfg, catalog, lambda: 50.0, lengths=lengths)
        session.receive(msgpack.packb({"type": "append", "id": utt_id, "text": text}))
        return catalog.asked[-1]

    # None ended yet: the text it holds after its first unit ("Then more"), as before.
    assert opened("a", "First sentence. Then more").rest_chars == len("Then more")
    for chars in (100, 120, 400):  # flushed answers of 100, 120 and 400 characters
        session = Session("s", cfg, catalog, lambda: 50.0, lengths=lengths)
        session.receive(msgpack.packb({"type": "append", "id": "x", "text": "y" * chars}))
        session.receive(msgpack.packb({"type": "flush", "id": "x"}))
    # 25 characters sent of a median of 120: 95 to come, and the 9 it holds.
    assert opened("b", "First sentence. Then more").rest_chars == 95 + 9
    # Past the guess: what it holds only.
    assert opened("c", "First sentence. " + "z" * 200).rest_chars == 200
    # In the share of Chinese characters its text so far has (15 sent, "然后" held; 11 of
    # the first unit's 13 are Han, its commas not).
    kokoro = VoiceInfo("kokoro/zf", "zf", ("zh",), "kokoro", 24000, "kokoro", "zf")
    catalog.voices, catalog.default_voice = {"kokoro/zf": kokoro}, "kokoro/zf"
    job = opened("d", "请注意，本次列车开往上海。然后")
    assert (job.rest_chars, job.rest_cjk) == (120 - 15 + 2, round((120 - 15 + 2) * 11 / 13))
    # A ``speak`` is whole: nothing is guessed.
    session = Session("s", cfg, catalog, lambda: 50.0, lengths=lengths)
    _speak(session, "e")
    assert catalog.asked[-1].rest_chars == len("Again.")


def test_a_mixed_unit_names_every_voice_it_speaks_with() -> None:
    """Issue 32: a unit in English and Mandarin holds the thread as its Mandarin does; the
    job of its first part carries the other part's voice, so the worker counts the stream
    at its costliest voice's RTF (a mixed burst underran 2 of 4 streams when it did not)."""
    hibari = VoiceInfo("hibari/heart", "heart", ("en",), "hibari", 24000, "hibari/heart")
    kokoro = VoiceInfo("kokoro/zf", "zf", ("zh",), "kokoro", 24000, "kokoro", "zf")
    catalog = BusyCatalog(0.0, 0.0)
    catalog.voices = {"hibari/heart": hibari, "kokoro/zf": kokoro}
    catalog.default_voice = "hibari/heart"
    catalog.lang_voices = routes(catalog.voices, "hibari/heart", (("zh", "kokoro/zf"),))
    session = Session("s1", Config(cache_dir=Path("/tmp/rtts-test"), models_dir=Path("/tmp/rtts-test")), catalog,
                      lambda: 50.0)
    session.receive(msgpack.packb({"type": "speak", "id": "u", "text": "Hello, 欢迎来到杭州。"}))
    first = catalog.asked[0]
    assert first.voice.id == "hibari/heart" and [v.id for v in first.voices] == ["kokoro/zf"]
