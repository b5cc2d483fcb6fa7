"""One synthesis for every subscriber of an announcement on this instance.

Each subscriber's session speaks an announcement as its own utterance, in its own
format and rate, and so makes its own jobs; they are the same jobs (same text, voice,
language, speed, in the same order: ``Job.shared``). The first subscriber to ask for
job *k* starts the one real synthesis of it; the others join that run: they get the
chunks it has produced so far at once and the rest as they come. The chunks are kept
until every subscriber the announcement was handed to has ended it, so one that is
behind (its outbox full, its own utterance still playing) joins late and still costs
no synthesis.

Everything here runs on the event loop; the inference thread sees one ordinary job.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from rtts.synthesis.inference import InferenceWorker
from rtts.synthesis.jobs import Job, JobAudio, JobDone, JobEvent, JobFailed

log = logging.getLogger(__name__)

__all__ = ["SharedJobs"]


@dataclass(eq=False)
class _Run:
    """The one synthesis of an announcement's job, and who listens to it."""

    job: Job  # the job the worker runs
    events: list[JobEvent] = field(default_factory=list)
    listeners: list[Job] = field(default_factory=list)

    @property
    def over(self) -> bool:
        return bool(self.events) and isinstance(self.events[-1], (JobDone, JobFailed))

    def spec(self) -> tuple[object, ...]:
        return _spec(self.job)


def _spec(job: Job) -> tuple[object, ...]:
    return job.text, job.voice.id, job.lang, job.speed, job.generator


@dataclass(eq=False)
class _Held:
    holders: int = 0
    runs: dict[int, _Run] = field(default_factory=dict)


class SharedJobs:
    def __init__(self, worker: InferenceWorker) -> None:
        self._worker = worker
        self._held: dict[str, _Held] = {}
        self.runs = 0  # syntheses started for announcements
        self.joined = 0  # subscribers' jobs answered by a synthesis another one started
        # Told of every piece of an announcement's audio as it is synthesized, (id, seconds):
        # how late it comes sets how far ahead announcements are timed (``Channels.audio``).
        self.on_audio: Callable[[str, float], None] = lambda announcement, seconds: None

    def hold(self, announcement: str) -> None:
        """One more subscriber was handed ``announcement``: keep its audio until it ends it."""
        self._held.setdefault(announcement, _Held()).holders += 1

    def release(self, announcement: str) -> None:
        held = self._held.get(announcement)
        if held is None:
            return
        held.holders -= 1
        if held.holders <= 0:
            del self._held[announcement]
            for run in held.runs.values():
                # A subscriber the channel let go may still be listening to a run: it ends
                # for it as it would have; only a run nobody listens to is dropped.
                if not run.over and not any(not job.cancelled for job in run.listeners):
                    self._worker.drop(run.job)

    def submit(self, job: Job) -> None:
        assert job.shared is not None
        announcement, index = job.shared
        held = self._held.get(announcement)
        run = held.runs.get(index) if held is not None else None
        if held is None or (run is not None and run.spec() != _spec(job)):
            # Not held (a subscriber that was let go) or spoken differently (its session
            # read a newer lexicon.txt): a synthesis of its own.
            self._worker.submit(job)
            return
        if run is None:
            # With its words, whoever asked: a subscriber that wants them may join later,
            # and a session that did not ask ignores them. Marked shared for the worker too:
            # it is made the same way on every instance (inference.SHARED_LEAD_S).
            run = _Run(
                Job(announcement, job.text, job.voice, job.lang, job.speed, job.deadline, opens=job.opens, words=True,
                    shared=job.shared, generator=job.generator)
            )
            run.job.sink = lambda _, event, run=run: self._fan_out(run, event)
            held.runs[index] = run
            run.listeners.append(job)
            self.runs += 1
            self._worker.submit(run.job)
            return
        self.joined += 1
        # On a later loop turn, like every other job event: never inside the caller's effects.
        asyncio.get_running_loop().call_soon(self._join, run, job)

    def _join(self, run: _Run, job: Job) -> None:
        for event in list(run.events):
            if job.cancelled or job.sink is None:
                return
            job.sink(job, event)
        if not run.over:
            run.listeners.append(job)

    def _fan_out(self, run: _Run, event: JobEvent) -> None:
        run.events.append(event)
        if isinstance(event, JobAudio):
            self.on_audio(run.job.utterance, len(event.samples) / run.job.voice.native_rate)
        for job in list(run.listeners):
            if not job.cancelled and job.sink is not None:
                job.sink(job, event)
        if run.over:
            run.listeners.clear()
