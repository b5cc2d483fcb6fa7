"""The admission bound a box proves (issue 32): lowered where a stream underran beside
others, back to the configured one in time (end to end: tests/live/test_late_audio.py)."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest

from rtts import protocol
from rtts.config import Config
from rtts.speech.effects import Send, Submit
from rtts.speech.session import Session
from rtts.synthesis.admission_bound import DROP, FLOOR, RECOVER_PER_S, AdmissionBound
from rtts.synthesis.jobs import Job, JobAudio, JobDone
from tests.unit.test_admission import BusyCatalog
from tests.unit.test_session import Clock, tone


def test_an_underrun_beside_other_streams_lowers_the_bound_for_a_while() -> None:
    clock = Clock()
    bound = AdmissionBound(0.95, clock)
    bound.underran(0.93, 0)  # alone on the thread: no admission made it late
    assert bound.now() == 0.95 and not bound.lowered
    bound.underran(0.93, 3)
    assert bound.now() == pytest.approx(0.93 * DROP) and bound.lowered
    bound.underran(0.93, 3)  # the others of the same burst: no lower than once
    assert bound.now() == pytest.approx(0.93 * DROP)
    clock.t += 10
    assert bound.now() == pytest.approx(0.93 * DROP + 10 * RECOVER_PER_S)
    bound.underran(0.2, 1)  # never below the floor
    assert bound.now() == pytest.approx(0.95 * FLOOR)
    clock.t += 1000
    assert bound.now() == 0.95 and not bound.lowered


class LoadedCatalog(BusyCatalog):
    """A thread carrying three streams beside the one asked about, at a load of 0.93."""

    def thread_load(self, job: Job) -> tuple[float, int]:
        return 0.93, 3


def test_a_stream_that_underran_makes_the_next_one_wait_for_room() -> None:
    clock = Clock()
    cfg = Config(cache_dir=Path("/tmp/rtts-test"), models_dir=Path("/tmp/rtts-test"), admission_max_load=0.95)
    bound = AdmissionBound(cfg.admission_max_load, clock)
    catalog = LoadedCatalog(wait=0.1, load=0.9)
    first = Session("s1", cfg, catalog, clock, bound=bound)

    def speak(session: Session, utt: str) -> list:
        return session.receive(msgpack.packb({"type": "speak", "id": utt, "text": "Hello there. Again."}))

    (start,) = [e.message for e in speak(first, "a") if isinstance(e, Send) and isinstance(e.message, protocol.Start)]
    assert start.queued is None  # 0.9 is within 0.95
    job = first.utterances["a"].job
    assert job is not None
    first.job_event(job, JobAudio(tone(0.5, job.voice.native_rate)))
    effects = first.job_event(job, JobDone(0.05))
    (second,) = [e.job for e in effects if isinstance(e, Submit)]
    clock.t += 0.8  # its next unit's audio 0.3 s after the first's ran out
    first.job_event(second, JobAudio(tone(0.5, second.voice.native_rate)))
    assert first.utterances["a"].underruns == 1 and bound.lowered
    # Another client's stream at the same load now waits for room, and is told so.
    other = Session("s2", cfg, catalog, clock, bound=bound)
    (start,) = [e.message for e in speak(other, "b") if isinstance(e, Send) and isinstance(e.message, protocol.Start)]
    assert start.queued is True and other.utterances["b"].job.room == pytest.approx(bound.now())
