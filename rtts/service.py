"""The running service without its network face: voices, the inference thread,
idle unload, metrics, and an in-process way to speak a whole text.

``server.py`` puts WebSocket and HTTP in front of it; ``rtts say`` uses it directly,
and both drive a ``connection.Connection``, so the command line and the server run the
very same pipeline.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from pathlib import Path

import prometheus_client as prom

from rtts import protocol
from rtts.broadcast.bus import make_bus
from rtts.broadcast.channels import Channels
from rtts.broadcast.clock import make_clock
from rtts.broadcast.shared_jobs import SharedJobs
from rtts.broadcast.timeline import LeadEstimator
from rtts.config import Config
from rtts.engines.base import VoiceInfo
from rtts.engines.voices import VoiceRegistry, host_ops
from rtts.host import memory
from rtts.host.client import Host
from rtts.speech.append_lengths import AppendLengths
from rtts.speech.session import Session
from rtts.synthesis.admission_bound import AdmissionBound
from rtts.synthesis.inference import InferenceWorker
from rtts.synthesis.jobs import Job
from rtts.synthesis.phrase_cache import PhraseCache
from rtts.text.lexicon import FILE_NAME as LEXICON_FILE
from rtts.text.lexicon import Lexicon

log = logging.getLogger(__name__)

# A connecting client's likely model loads this long after the connection, and then only
# once no job is queued: a request sent right behind the connection (the usual case,
# ~1-10 ms later) loads its own model first instead of waiting behind another's.
PRELOAD_DELAY_S = 0.05

_TTFA_BUCKETS = (0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
_RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0)


def _task_count() -> int:
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:  # rendered outside the event loop
        return -1


class Metrics:
    """Prometheus metrics on a registry of their own, so several services can coexist."""

    def __init__(self, service: Service) -> None:
        self.registry = prom.CollectorRegistry()
        r = self.registry
        self.connections = prom.Gauge("rtts_connections_open", "open WebSocket connections", registry=r)
        self.connections_total = prom.Counter("rtts_connections", "WebSocket connections accepted", registry=r)
        self.utterances = prom.Counter("rtts_utterances", "utterances ended, by reason", ["reason"], registry=r)
        self.errors = prom.Counter("rtts_errors", "error messages sent, by code", ["code"], registry=r)
        self.refused = prom.Counter(
            "rtts_connections_refused", "WebSocket requests refused before the upgrade, by HTTP status",
            ["status"], registry=r,
        )
        self.stalled = prom.Counter("rtts_clients_stalled", "clients dropped for accepting no data", registry=r)
        prom.Gauge("rtts_event_loop_tasks", "asyncio tasks alive", registry=r).set_function(_task_count)
        prom.Gauge("rtts_inference_busy_seconds", "seconds the inference thread has spent on jobs",
                   registry=r).set_function(lambda: service.worker.busy_s)
        prom.Gauge("rtts_inference_progress_age_seconds", "seconds since the inference thread showed progress",
                   registry=r).set_function(lambda: service.worker.progress_age())
        self.ttfa = prom.Histogram(
            "rtts_ttfa_seconds", "time from request to first audio frame", buckets=_TTFA_BUCKETS, registry=r
        )
        self.rtf = prom.Histogram("rtts_rtf", "compute time / audio time per utterance", buckets=_RTF_BUCKETS, registry=r)
        # Each utterance's end.stats, summed: the underruns the server itself saw (issue 32).
        self.underruns = prom.Counter(
            "rtts_underruns", "frames a client playing from its first frame waited for (end.stats.underruns)", registry=r
        )
        self.late = prom.Counter("rtts_late_seconds", "what those clients waited, summed (end.stats.late_ms)", registry=r)
        prom.Gauge("rtts_queue_depth", "jobs waiting for the inference thread", registry=r).set_function(
            lambda: service.worker.queue_depth
        )
        # What the inference thread can carry, by this box's measurements (issue 32).
        worker, bound = service.worker, service.admission
        rtf = prom.Gauge("rtts_engine_rtf", "the inference thread's running estimate of an engine's compute "
                         "seconds per second of audio, on this box", ["engine"], registry=r)
        streams = prom.Gauge("rtts_capacity_streams", "streams of an engine the inference thread keeps playing at "
                             "once within the admission bound (--admission-max-load, lowered for a while after an underrun), by "
                             "its measured RTF", ["engine"], registry=r)
        for engine in worker.rtf:
            rtf.labels(engine).set_function(lambda e=engine: worker.rtf[e])
            streams.labels(engine).set_function(lambda e=engine: worker.streams(e, bound.now()))
        prom.Gauge("rtts_inference_load", "the streams with work on the inference thread, their RTFs summed "
                   "(1: its whole time; new utterances are late above the admission bound)",
                   registry=r).set_function(worker.load)
        prom.Gauge("rtts_streams_waiting", "streams waiting for room on the inference thread (start.queued)",
                   registry=r).set_function(lambda: worker.waiting)
        # Whether holding streams back costs the box: the thread should be busy while they wait.
        prom.Gauge("rtts_contended_seconds", "seconds at least one stream waited for room on the inference thread",
                   registry=r).set_function(lambda: worker.contended()[0])
        prom.Gauge("rtts_contended_idle_seconds", "of rtts_contended_seconds, the seconds the inference thread had "
                   "nothing to run", registry=r).set_function(lambda: worker.contended()[1])
        prom.Gauge("rtts_models_loaded", "models loaded in memory", registry=r).set_function(
            lambda: sum(1 for e in service.registry.engines.values() if e.loaded)
        )
        prom.Gauge("rtts_voices", "voices available", registry=r).set_function(lambda: len(service.registry.voices))
        cache = service.worker.cache
        # Counters kept by the cache itself, exported as they are read.
        _LiveCounter("rtts_phrase_cache_hits", "text units replayed from the phrase cache", lambda: cache.hits, r)
        _LiveCounter("rtts_phrase_cache_misses", "cacheable text units that had to be synthesized", lambda: cache.misses, r)
        prom.Gauge("rtts_phrase_cache_bytes", "audio held by the phrase cache", registry=r).set_function(
            lambda: cache.size_bytes
        )
        _LiveCounter(
            "rtts_requeues",
            "times a running job went back on the queue for one due sooner",
            lambda: service.worker.requeues,
            r,
        )
        _LiveCounter(
            "rtts_held_on",
            "chunks a job decoded on instead of yielding, to outlast the work queued before it",
            lambda: service.worker.held_on,
            r,
        )
        channels = service.channels
        _LiveCounter("rtts_announcements_started", "channel announcements started on this instance",
                     lambda: channels.started, r)
        _LiveCounter("rtts_announcements_dropped", "channel announcements this instance could not queue",
                     lambda: channels.dropped, r)
        _LiveCounter("rtts_announcement_jobs_shared", "subscribers' announcement jobs served by a synthesis "
                     "another subscriber started", lambda: channels.jobs.joined, r)
        prom.Gauge("rtts_sync_lead_seconds", "how far ahead the next announcement's play_at is set (learnt from "
                   "how late audio came, or --sync-lead)", registry=r).set_function(lambda: channels.lead.lead())
        _LiveCounter("rtts_sync_claims_failed", "announcements played at this instance's own time because the "
                     "bus did not agree one in time (their kiosks may differ from other instances')",
                     lambda: channels.claims_failed, r)
        _LiveCounter("rtts_sync_claims_refused", "announcements played at this instance's own time because the "
                     "time agreed in the bus was one no instance could have claimed (written there by another "
                     "hand)", lambda: channels.claims_refused, r)
        bus = channels.bus
        _LiveCounter("rtts_bus_messages_dropped", "messages from the bus (Redis) refused as unreadable or invalid",
                     lambda: bus.dropped, r)
        _LiveCounter("rtts_bus_listener_errors", "unexpected failures of the bus listener (each logged, then "
                     "listened again)", lambda: bus.errors, r)
        prom.Gauge("rtts_bus_up", "1 while this instance hears the bus (always with the in-process one)",
                   registry=r).set_function(lambda: bus.state in ("local", "listening"))
        clock = service.clock
        prom.Gauge("rtts_clock_offset_seconds", "how far the shared clock announcements are timed on is ahead "
                   "of this host's (--shared-clock bus: the Redis server's)", registry=r).set_function(
            lambda: clock.offset
        )
        _LiveCounter("rtts_inference_process_starts", "inference processes started (loads after an idle "
                     "unload, or after a crash)", lambda: service.host.starts, r)
        prom.Gauge("rtts_inference_process_resident_bytes", "RSS of the inference process (models, "
                   "ONNX Runtime, zh/ja dictionaries); 0 when it is not running", registry=r).set_function(
            service.host.resident_bytes
        )
        worker = service.worker
        prom.Gauge("rtts_memory_budget_bytes", "what the server and its inference process may hold together "
                   "(--memory-budget); 0: no budget", registry=r).set_function(lambda: worker.budget_bytes or 0)
        prom.Gauge("rtts_server_resident_bytes", "RSS of the server process", registry=r).set_function(memory.own_rss)
        prom.Gauge("rtts_server_anonymous_bytes", "anonymous memory of the server: what the budget counts",
                   registry=r).set_function(memory.anonymous_bytes)
        prom.Gauge("rtts_inference_process_anonymous_bytes", "anonymous memory of the inference process: what "
                   "the budget counts", registry=r).set_function(service.host.anonymous_bytes)
        parts = prom.Gauge("rtts_memory_part_bytes", "anonymous memory each part loaded in the inference process "
                           "holds (measured at its load, else the engine's prior)", ["part"], registry=r)
        self._parts = parts
        _LiveCounter("rtts_memory_restarts", "inference processes ended to make room under the memory budget",
                     lambda: worker.memory_restarts, r)
        _LiveCounter("rtts_memory_refusals", "jobs refused because their voice cannot fit the memory budget",
                     lambda: worker.memory_refusals, r)
        _LiveCounter("rtts_memory_bounded_runs", "jobs whose runs were shortened to fit the memory budget",
                     lambda: worker.bounded_runs, r)

    def observe(self, message: protocol.ServerMessage) -> None:
        if isinstance(message, protocol.End):
            self.utterances.labels(message.reason).inc()
            self.underruns.inc(message.stats.get("underruns", 0))
            self.late.inc(message.stats.get("late_ms", 0.0) / 1000)
            if message.reason == "done" and message.stats.get("ttfa_ms", -1) >= 0:
                self.ttfa.observe(message.stats["ttfa_ms"] / 1000)
                self.rtf.observe(message.stats["rtf"])
        elif isinstance(message, protocol.Error):
            self.errors.labels(message.code).inc()

    def render(self, parts: dict[str, float] | None = None) -> bytes:
        """The metrics; ``parts``: the resident parts (MB) to show now."""
        self._parts.clear()
        for name, mb in (parts or {}).items():
            self._parts.labels(name).set(mb * memory.MB)
        return prom.generate_latest(self.registry)


class Service:
    def __init__(self, config: Config) -> None:
        self.config = config
        # The inference process, shared by every engine; started by the first model load.
        self.host = Host(host_ops(), call_timeout_s=config.inference_timeout)
        self.registry = VoiceRegistry.discover(
            config.models_dir,
            config.cache_dir or Path(),  # Config fills it in
            config.threads,
            default_voice=config.default_voice,
            lang_voices=config.lang_voices,
            host=self.host,
            generator=config.generator,
        )
        unknown = sorted({name for name, _ in config.first_unit_chars} - {k.name for k in self.registry.kinds})
        if unknown:
            log.warning("first-unit-chars given for engines that are not registered: %s", ", ".join(unknown))
        self._loop: asyncio.AbstractEventLoop | None = None
        cache = PhraseCache(int(config.phrase_cache_mb * 1024 * 1024))
        # Whole response bodies the HTTP routes hold (captioned JSON with stream false).
        self.bodies = memory.WholeBodies(int(config.max_whole_body_mb * memory.MB))
        bodies = self.bodies
        # --admission-max-load, lowered for a while where a stream underran (issue 32).
        self.admission = AdmissionBound(config.admission_max_load, time.monotonic)
        # What the append streams of every connection came to: the guess at what an open
        # one still has to say, by which a stream waiting for room is told when (issue 32).
        self.append_lengths = AppendLengths()
        self.worker = InferenceWorker(
            self.registry, self._post, cache=cache, host=self.host, budget_bytes=config.memory_budget_bytes,
            server_rss=lambda: bodies.server_own(memory.anonymous_bytes()), server_pending=bodies.pending,
        )
        bus = make_bus(config.bus, config.max_text_chars)
        # The clock announcements are timed on, read by every session's pong too.
        self.clock = make_clock(config.shared_clock, bus, os.environ)
        lead = LeadEstimator(config.sync_min_lead, config.sync_max_lead, fixed=config.sync_lead)
        self.channels = Channels(
            bus, SharedJobs(self.worker), config.channel_queue, clock=self.clock.now, lead=lead, gap=config.sync_gap,
            model_wait=self.model_wait, model_load=self.model_load,
        )
        self.metrics = Metrics(self)
        self.active = 0  # connections and HTTP syntheses in progress
        self._idle_timer: asyncio.TimerHandle | None = None
        self._ids = itertools.count(1)
        self._lexicon = Lexicon({})
        self._lexicon_stamp: int | None = None
        self.started = time.monotonic()

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.worker.start()
        if self.config.spare_process:
            self.worker.prestart()  # the first request's wake skips the process start
        self.clock.start()
        idle = self.config.idle_unload
        log.info(
            "%d voices (default %s); models load on demand%s", len(self.registry.voices), self.registry.default_voice,
            f", unload after {idle:.0f} s idle" if idle > 0 else "",
        )

    def stop(self, timeout: float = 10.0) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self.clock.stop()
        self.worker.stop(timeout)
        self.host.stop()

    def _post(self, callback) -> None:  # type: ignore[no-untyped-def]
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(callback)

    # ------------------------------------------------------------ activity and idle unload

    def acquire(self) -> None:
        """A client arrived: keep models, and start loading what it will probably want:
        the model used last (after an idle unload, clients go on in their language),
        or the default voice's."""
        self.active += 1
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        model = self.worker.last_used(self.registry.voices[self.registry.default_voice].model)
        engine = self.registry.engines.get(model)
        if engine is not None and not engine.loaded:
            # Cold (a start or an idle unload): what the engines' first requests would wait
            # for (Kokoro's Mandarin and Japanese front ends take seconds) starts first, and
            # loads in the inference process beside the model loads, not after them. The
            # model loads once no job is queued: a first request for another voice, there
            # a few milliseconds after the connection, loads its own model first.
            self.worker.warm_up(self.registry.kinds_in_use())
            if self._loop is not None:
                self._loop.call_later(PRELOAD_DELAY_S, self._preload_if_wanted, model)

    def _preload_if_wanted(self, model: str) -> None:
        if self.active:
            self.worker.preload(model, urgent=False)

    def release(self) -> None:
        self.active -= 1
        if self.active == 0 and self.config.idle_unload > 0 and self._loop is not None:
            self._idle_timer = self._loop.call_later(self.config.idle_unload, self._idle)

    def _idle(self) -> None:
        self._idle_timer = None
        if self.active == 0:
            self.worker.unload_all(spare=self.config.spare_process)

    async def preload_default(self) -> bool:
        """Load the default voice's model now; True when it loaded."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()
        model = self.registry.voices[self.registry.default_voice].model
        self.worker.preload(model, lambda ok: done.done() or done.set_result(ok))
        # Whatever else the engines' first requests would wait for (Kokoro's Mandarin and
        # Japanese front ends take seconds) starts now, after the default voice's load.
        self.worker.warm_up(self.registry.kinds_in_use())
        return await done

    async def rescan(self) -> tuple[list[str], list[str]]:
        """Look at the models directory again (SIGHUP); returns (added, removed) voice ids."""
        before = set(self.registry.voices)
        # Reading the files may take a while: off the event loop. Engines are touched only
        # on the inference thread (engines/base.py), so the result is adopted there.
        found = await asyncio.to_thread(self.registry.scan)
        adopted: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def on_done(error: BaseException | None) -> None:
            if not adopted.done():
                adopted.set_exception(error) if error is not None else adopted.set_result(None)

        self.worker.call(lambda: self.registry.adopt(found), on_done)
        await adopted
        after = set(self.registry.voices)
        added, removed = sorted(after - before), sorted(before - after)
        log.info(
            "rescan: %d voices; added %s; removed %s",
            len(after),
            ", ".join(added) or "none",
            ", ".join(removed) or "none",
        )
        return added, removed

    def memory_state(self) -> dict[str, object]:
        """The budget and what the server, the inference process and each part in it hold
        (anonymous MB, what the budget counts), for /readyz. The worker replaces its
        dict of parts rather than changing it, so this reads it from the event loop."""
        worker = self.worker
        return {
            "budget_mb": round((worker.budget_bytes or 0) / memory.MB),
            "server_mb": round(memory.anonymous_bytes() / memory.MB, 1),
            "whole_bodies_mb": round(self.bodies.held / memory.MB, 1),  # in server_mb, not counted by the budget
            "inference_process_mb": round(self.host.anonymous_bytes() / memory.MB, 1),
            "parts_mb": {k: round(v, 1) for k, v in worker.resident_parts().items()},
            "restarts": worker.memory_restarts,
            "refusals": worker.memory_refusals,
        }

    def loaded_voices(self) -> list[str]:
        return [v.id for v in self.registry.voices.values() if self.registry.engines[v.model].loaded]

    def model_wait(self, voice_id: str) -> float:
        """Seconds before ``voice_id``'s model is in memory: its measured load time when it
        is not (the estimate admission control uses), else 0."""
        info = self.registry.voices.get(voice_id)
        engine = self.registry.engines.get(info.model) if info is not None else None
        if info is None or engine is None or engine.loaded:
            return 0.0
        return self.model_load(voice_id)

    def model_load(self, voice_id: str) -> float:
        """Seconds ``voice_id``'s model takes to load (measured, else its engine's estimate),
        loaded now or not; 0 for a voice not here."""
        info = self.registry.voices.get(voice_id)
        return 0.0 if info is None else self.worker.load_s.get(info.engine, 2.0)

    # ------------------------------------------------------------ sessions

    def new_session(self, authorized: bool = False, voices_at: str = "ready.voices") -> Session:
        return Session(
            f"s{next(self._ids)}", self.config, _CatalogView(self), authorized=authorized, lexicon=self.lexicon(),
            wall=self.clock.now, voices_at=voices_at, bound=self.admission, lengths=self.append_lengths,
        )

    def lexicon(self) -> Lexicon:
        """The models directory's lexicon.txt, read again when the file changes (one stat per call)."""
        path = Path(self.config.models_dir or ".") / LEXICON_FILE
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            stamp = None
        if stamp != self._lexicon_stamp:
            self._lexicon = Lexicon.load(path) if stamp is not None else Lexicon({})
            self._lexicon_stamp = stamp
            if self._lexicon:
                log.info("lexicon %s: %d entries", path, len(self._lexicon.entries))
        return self._lexicon


class _CatalogView:
    """The voices a session sees, with the live loaded state."""

    def __init__(self, service: Service) -> None:
        self._service = service

    # Properties, not copies: a SIGHUP rescan swaps the registry's dicts under live sessions.
    @property
    def voices(self) -> dict[str, VoiceInfo]:
        return self._service.registry.voices

    @property
    def default_voice(self) -> str:
        return self._service.registry.default_voice

    @property
    def lang_voices(self) -> dict[str, VoiceInfo]:
        return self._service.registry.lang_voices

    def first_unit_chars(self, engine: str, lang: str | None = None) -> int:
        own = self._service.registry.first_unit_chars(engine, lang)
        return self._service.config.first_unit_chars_for(engine, own)

    def loaded_voices(self) -> list[str]:
        return self._service.loaded_voices()

    def estimate(self, job: Job, room: float | None = None) -> tuple[float, float]:
        worker = self._service.worker
        engine = self._service.registry.engines.get(job.voice.model)
        if engine is not None and not engine.loaded and job.voice.model not in worker.loading:
            # Load what was asked for now: if admission refuses the utterance for the wait,
            # its retry finds the model in memory instead of being refused again.
            worker.preload(job.voice.model, lang=job.lang)
        return worker.estimate(job, room)

    def first_audio_s(self, voice: VoiceInfo, lang: str, text: str) -> tuple[float, float]:
        return self._service.worker.first_audio_s(voice, lang, text)

    def next_run_s(self, voice: VoiceInfo, lang: str, text: str, generator: str | None = None) -> float:
        return self._service.worker.next_run_s(voice, lang, text, generator)

    def capacity(self) -> dict[str, int]:
        worker, max_load = self._service.worker, self._service.admission.now()
        return {engine: worker.streams(engine, max_load) for engine in sorted(worker.rtf)}

    def thread_load(self, job: Job) -> tuple[float, int]:
        return self._service.worker.thread_load(job)


class _LiveCounter:
    """A Prometheus counter whose value is read from elsewhere at scrape time."""

    def __init__(self, name: str, documentation: str, read, registry: prom.CollectorRegistry) -> None:  # type: ignore[no-untyped-def]
        self._name = name
        self._doc = documentation
        self._read = read
        registry.register(self)

    def collect(self):  # type: ignore[no-untyped-def]
        from prometheus_client.core import CounterMetricFamily

        yield CounterMetricFamily(self._name, self._doc, value=self._read())
