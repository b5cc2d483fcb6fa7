"""The one inference thread: every model load, run and unload happens here.

Work arrives as small jobs (one clause or sentence each) from any connection. The
thread always takes the job whose client will run out of audio first (earliest
deadline), so connections interleave fairly and a stream about to starve goes
ahead of streams with audio in hand. A cancelled job is skipped before it starts
and abandoned between the chunks an engine yields.

Events go back to the event loop with ``loop.call_soon_threadsafe``; nothing here
touches asyncio otherwise, and nothing on the event loop runs a model.
"""

from __future__ import annotations

import gc
import heapq
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .engines.base import EngineError
from .engines.ort import release_memory
from .jobs import Job, JobAudio, JobDone, JobEvent, JobFailed
from .protocol import ErrorCode
from .voices import VoiceRegistry

log = logging.getLogger(__name__)

# A model load shows no progress until it ends; the watchdog allows it this long.
LOAD_GRACE_S = 300.0

Post = Callable[[Callable[[], None]], None]  # runs a callback on the event loop


@dataclass(order=True)
class _Entry:
    deadline: float
    seq: int
    job: Job | None = field(compare=False, default=None)
    control: Callable[[], None] | None = field(compare=False, default=None)


class InferenceWorker:
    def __init__(self, registry: VoiceRegistry, post: Post, on_models_changed: Callable[[], None] | None = None):
        self._registry = registry
        self._post = post
        self._on_models_changed = on_models_changed
        self._heap: list[_Entry] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="rtts-inference", daemon=True)
        self._control_seq = 0
        # Progress marks for the watchdog and /metrics; written by the thread only.
        self.last_progress = time.monotonic()
        self.current: Job | None = None
        self.idle = False  # waiting for work
        self.loading: set[str] = set()
        self.jobs_done = 0
        self.jobs_skipped = 0
        self.busy_s = 0.0
        self.loads = 0
        self.unloads = 0

    # ------------------------------------------------------------ event-loop side

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            for entry in self._heap:
                if entry.job is not None:
                    entry.job.cancelled = True
            self._cond.notify()
        self._thread.join(timeout)

    def submit(self, job: Job) -> None:
        with self._cond:
            heapq.heappush(self._heap, _Entry(job.deadline, job.seq, job))
            self._cond.notify()

    def drop(self, job: Job) -> None:
        """Cancel a job; if queued it is skipped, if running it stops at the next chunk."""
        job.cancelled = True

    def preload(self, model: str, on_done: Callable[[bool], None] | None = None) -> None:
        """Load a model ahead of need (a client connected), before any queued job.

        ``on_done(loaded)`` is then posted to the event loop.
        """

        def action() -> None:
            ok = self._preload(model)
            if on_done is not None:
                self._post(lambda: on_done(ok))

        self._control(action)

    def progress_age(self, now: float | None = None) -> float:
        """Seconds since the thread last showed it is alive: 0 while it waits for work; a
        model load in progress counts as alive for up to LOAD_GRACE_S."""
        if self.idle:
            return 0.0
        now = time.monotonic() if now is None else now
        age = now - self.last_progress
        return max(0.0, age - LOAD_GRACE_S) if self.loading else age

    def unload_all(self) -> None:
        self._control(self._unload_all)

    @property
    def queue_depth(self) -> int:
        with self._cond:
            return sum(1 for e in self._heap if e.job is not None and not e.job.cancelled)

    # ------------------------------------------------------------ thread side

    def _control(self, action: Callable[[], None]) -> None:
        with self._cond:
            # Control work sorts before every job (deadline -inf) in arrival order.
            self._control_seq += 1
            heapq.heappush(self._heap, _Entry(float("-inf"), self._control_seq, control=action))
            self._cond.notify()

    def _next(self) -> _Entry | None:
        with self._cond:
            while not self._heap and not self._stopping:
                self.idle = True
                self._cond.wait(timeout=5.0)
                self.idle = False
                self.last_progress = time.monotonic()
            if self._stopping:
                return None
            return heapq.heappop(self._heap)

    def _run(self) -> None:
        while (entry := self._next()) is not None:
            self.last_progress = time.monotonic()
            try:
                if entry.control is not None:
                    entry.control()
                elif entry.job is not None:
                    self._run_job(entry.job)
            except Exception:  # the thread must survive anything a model does
                log.exception("inference thread: unexpected failure")
            self.last_progress = time.monotonic()

    def _load(self, model: str) -> None:
        engine = self._registry.engines[model]
        if engine.loaded:
            return
        self.last_progress = time.monotonic()
        self.loading.add(model)
        self._changed()
        t0 = time.perf_counter()
        try:
            engine.load()
            self.loads += 1
            log.info("loaded %s in %.2f s", model, time.perf_counter() - t0)
        except EngineError as exc:
            log.error("cannot load %s: %s", model, exc)
            raise
        finally:
            self.loading.discard(model)
            self._changed()

    def _preload(self, model: str) -> bool:
        try:
            self._load(model)
        except EngineError:
            return False  # already logged; the job that needs it will report engine_unavailable
        return True

    def _unload_all(self) -> None:
        dropped = [key for key, engine in self._registry.engines.items() if engine.loaded]
        for key in dropped:
            self._registry.engines[key].unload()
        gc.collect()
        release_memory()
        if dropped:
            self.unloads += 1
            log.info("idle: unloaded %s", ", ".join(dropped))
            self._changed()

    def _run_job(self, job: Job) -> None:
        if job.cancelled:
            self.jobs_skipped += 1
            return
        self.current = job
        t0 = time.perf_counter()
        try:
            try:
                self._load(job.voice.model)
            except EngineError as exc:
                self._emit(job, JobFailed(ErrorCode.ENGINE_UNAVAILABLE.value, f"voice {job.voice.id} is unavailable: {exc}"))
                return
            t0 = time.perf_counter()  # the load is not part of this job's RTF
            engine = self._registry.engine_for(job.voice)
            chunks = engine.synthesize(job.text, job.voice, job.lang, job.speed)
            try:
                for chunk in chunks:
                    if job.cancelled:
                        break
                    self._emit(job, JobAudio(chunk))
                    self.last_progress = time.monotonic()
            finally:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()
            if job.cancelled:
                self.jobs_skipped += 1
            else:
                self.jobs_done += 1
                self._emit(job, JobDone(time.perf_counter() - t0))
        except Exception as exc:
            log.exception("synthesis failed for %s", job.voice.id)
            self._emit(job, JobFailed(ErrorCode.INTERNAL.value, f"synthesis failed ({type(exc).__name__})"))
        finally:
            self.busy_s += time.perf_counter() - t0
            self.current = None

    def _emit(self, job: Job, event: JobEvent) -> None:
        sink = job.sink
        if sink is not None:
            self._post(lambda: sink(job, event))

    def _changed(self) -> None:
        if self._on_models_changed is not None:
            self._post(self._on_models_changed)
