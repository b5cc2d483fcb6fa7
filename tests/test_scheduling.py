"""Sharing the one inference thread: deadlines, yielding between windows, admission, the phrase cache."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest

from rtts import protocol
from rtts.config import Config
from rtts.engines.base import VoiceInfo
from rtts.inference import YIELD_GUARD_S, InferenceWorker, can_yield
from rtts.jobs import Job, JobAudio, JobDone, JobEvent
from rtts.phrase_cache import PhraseCache
from rtts.session import Close, Send, Session, Submit
from rtts.voices import VoiceRegistry
from tests.catalogs import FixedCatalog
from tests.conftest import Client, ServerThread, make_config
from tests.test_server import fetch

PIPER = "piper/en_US-joe-medium"


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


# ---------------------------------------------------------------- admission control

VOICE = VoiceInfo("piper/a", "A", ("en",), "piper", 22050, "piper/a")


class BusyCatalog(FixedCatalog):
    """A catalog whose inference thread reports a given wait and load."""

    def __init__(self, wait: float, load: float) -> None:
        super().__init__({"piper/a": VOICE}, "piper/a", loaded=["piper/a"])
        self.answer = (wait, load)
        self.asked: list[Job] = []

    def estimate(self, job: Job) -> tuple[float, float]:
        self.asked.append(job)
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
    assert start and start[0].expected_wait_ms == 350
    assert catalog.asked[0].text == "Hello there." and any(isinstance(e, Submit) for e in effects)
    decoded = protocol.decode_server(protocol.encode(start[0]))
    assert decoded == start[0]


@pytest.mark.parametrize(("wait", "load"), [(5.0, 0.5), (0.1, 1.4)])
def test_queue_policy_accepts_a_late_utterance(wait: float, load: float) -> None:
    effects = _speak(_session(BusyCatalog(wait, load), admission="queue"))
    assert any(isinstance(e, Submit) for e in effects)


@pytest.mark.parametrize(("wait", "load"), [(5.0, 0.5), (0.1, 1.4)])
def test_refuse_policy_answers_busy_and_keeps_the_connection(wait: float, load: float) -> None:
    session = _session(BusyCatalog(wait, load), admission="refuse", admission_max_wait=2.0)
    effects = _speak(session)
    errors = [e.message for e in effects if isinstance(e, Send)]
    assert [(m.code, m.id) for m in errors] == [("busy", "u")]
    assert not any(isinstance(e, (Submit, Close)) for e in effects)
    assert not session.utterances  # nothing left half-started; the id may be reused
    session._catalog.answer = (0.0, 0.2)  # type: ignore[attr-defined]
    assert any(isinstance(e, Submit) for e in _speak(session))


def test_close_policy_closes_with_1013() -> None:
    effects = _speak(_session(BusyCatalog(9.0, 0.5), admission="close"))
    closes = [e for e in effects if isinstance(e, Close)]
    assert closes and closes[0].code == protocol.CloseCode.OVERLOADED == 1013


def test_in_time_utterances_pass_every_policy() -> None:
    for policy in ("queue", "refuse", "close"):
        assert any(isinstance(e, Submit) for e in _speak(_session(BusyCatalog(0.5, 0.9), admission=policy)))


# ---------------------------------------------------------------- the worker with a real voice


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    registry = VoiceRegistry.discover(None, tmp_path_factory.mktemp("cache"), threads=2)
    events: list[tuple[float, str, JobEvent]] = []
    lock = threading.Lock()

    def post(callback) -> None:  # type: ignore[no-untyped-def]
        callback()  # the "event loop" is whoever reads ``events``

    w = InferenceWorker(registry, post, cache=PhraseCache(1 << 20))
    w.start()
    w.events = events  # type: ignore[attr-defined]
    w.lock = lock  # type: ignore[attr-defined]
    yield w
    w.stop()


def _job(worker: InferenceWorker, name: str, text: str, deadline: float) -> Job:
    voice = worker._registry.voices[PIPER]

    def sink(job: Job, event: JobEvent) -> None:
        with worker.lock:  # type: ignore[attr-defined]
            worker.events.append((time.monotonic(), name, event))  # type: ignore[attr-defined]

    return Job(name, text, voice, "en", 1.0, deadline, sink=sink)


def _wait_done(worker: InferenceWorker, names: set[str], timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with worker.lock:  # type: ignore[attr-defined]
            done = {n for _, n, e in worker.events if isinstance(e, JobDone)}  # type: ignore[attr-defined]
        if names <= done:
            return
        time.sleep(0.02)
    raise AssertionError(f"jobs {names - done} did not finish")


@pytest.mark.slow
def test_a_long_unit_yields_to_a_stream_about_to_starve(worker: InferenceWorker) -> None:
    worker.preload(worker._registry.voices[PIPER].model)
    long_text = (
        "This one sentence is long enough that decoding it takes many windows, and while it runs, "
        "another listener who has nothing left to play must be served before it finishes speaking."
    )
    now = time.monotonic()
    worker.submit(_job(worker, "long", long_text, now + 30))  # a stream with audio in hand
    deadline = time.monotonic() + 60
    while not any(n == "long" for _, n, _ in worker.events):  # type: ignore[attr-defined]
        assert time.monotonic() < deadline
        time.sleep(0.005)
    worker.submit(_job(worker, "starving", "I have nothing left to play.", time.monotonic()))
    _wait_done(worker, {"long", "starving"})
    order = [(n, type(e).__name__) for _, n, e in worker.events]  # type: ignore[attr-defined]
    starving_done = order.index(("starving", "JobDone"))
    long_done = order.index(("long", "JobDone"))
    assert starving_done < long_done, order
    assert worker.requeues >= 1
    # The long unit's audio is complete despite being suspended: chunks before and after.
    long_audio = [e.samples for _, n, e in worker.events if n == "long" and isinstance(e, JobAudio)]  # type: ignore[attr-defined]
    assert sum(len(a) for a in long_audio) / 22050 > 5.0


@pytest.mark.slow
def test_repeated_phrases_come_from_the_cache(worker: InferenceWorker) -> None:
    worker.events.clear()  # type: ignore[attr-defined]
    hits = worker.cache.hits
    text = "Please mind the gap."
    worker.submit(_job(worker, "first", text, time.monotonic()))
    _wait_done(worker, {"first"})
    worker.submit(_job(worker, "again", text, time.monotonic()))
    _wait_done(worker, {"again"})
    audio = {
        name: np.concatenate([e.samples for _, n, e in worker.events if n == name and isinstance(e, JobAudio)])  # type: ignore[attr-defined]
        for name in ("first", "again")
    }
    assert np.array_equal(audio["first"], audio["again"])
    assert worker.cache.hits == hits + 1
    done = [e for _, n, e in worker.events if n == "again" and isinstance(e, JobDone)]  # type: ignore[attr-defined]
    assert done[0].compute_s == 0.0
    wait, load = worker.estimate(_job(worker, "x", text, time.monotonic()))
    assert (wait, load) == (0.0, 0.0)  # a cached phrase starts at once


@pytest.mark.slow
def test_server_reports_cache_hits_and_refuses_when_told(tmp_path: Path) -> None:
    config = make_config(tmp_path, admission="refuse", admission_max_wait=0.0)
    with ServerThread(config) as srv, Client(srv.url) as c:
        assert isinstance(c.recv(), protocol.Ready)
        # With no wait allowed at all, speaking while the model still loads (it takes
        # over a second, started by the connection) is refused; the connection stays.
        c.send(type="speak", id="cold", text="Hello.", voice=PIPER)
        msg = c.recv()
        assert isinstance(msg, protocol.Error) and msg.code == "busy" and msg.id == "cold"
        c.send(type="ping", t=1)
        assert isinstance(c.recv(), protocol.Pong)
    config = make_config(tmp_path, phrase_cache_mb=4.0)
    with ServerThread(config) as srv, Client(srv.url) as c:
        assert isinstance(c.recv(), protocol.Ready)
        for utt in ("a", "b"):
            c.send(type="speak", id=utt, text="Doors closing.", voice=PIPER)
            msgs = c.utterance(utt)
            assert isinstance(msgs[0], protocol.Start) and msgs[0].expected_wait_ms is not None
        _, _, body = fetch(srv.http + "/metrics")
        text = body.decode()
        assert "rtts_phrase_cache_hits_total 1.0" in text
        assert "rtts_phrase_cache_misses_total 1.0" in text


def test_a_job_yields_only_with_enough_audio_in_hand() -> None:
    # Nothing ahead: a little more than its own next chunk and the guard is enough.
    assert can_yield(0.2 + YIELD_GUARD_S, [], 0.1)
    assert not can_yield(0.05 + YIELD_GUARD_S, [], 0.1)
    # Seven newcomers' first chunks (50 ms each) outlast a first window of 116 ms.
    assert not can_yield(0.116, [0.05] * 7, 0.02)
    assert can_yield(1.0, [0.05] * 7, 0.1)


@pytest.mark.slow
def test_a_playing_stream_builds_a_buffer_before_newcomers_go_first(worker: InferenceWorker) -> None:
    worker.preload(worker._registry.voices[PIPER].model)
    worker.events.clear()  # type: ignore[attr-defined]
    held = worker.held_on
    now = time.monotonic()
    # "playing" is due first; five newcomers with nothing to play are queued behind it.
    worker.submit(_job(worker, "playing", "The morning train to Boston leaves from platform four at ten thirty.", now - 1))
    names = {f"new{i}" for i in range(5)}
    for name in sorted(names):
        worker.submit(_job(worker, name, "Passengers should have their tickets ready before boarding.", now))
    _wait_done(worker, names | {"playing"})
    events = worker.events  # type: ignore[attr-defined]
    first_new = next(i for i, (_, n, e) in enumerate(events) if n != "playing" and isinstance(e, JobAudio))
    before = sum(len(e.samples) for _, n, e in events[:first_new] if n == "playing" and isinstance(e, JobAudio))
    # More than its first window (10 latent frames, 0.12 s) before anyone else ran: it
    # decoded on instead of yielding at once.
    assert worker.held_on > held
    assert before / 22050 > 0.3, before / 22050
