"""The one inference thread: every model load, run and unload happens here.

Work arrives as small jobs (one clause or sentence each) from any connection. The
thread always takes the job whose client will run out of audio first (earliest
deadline), so connections interleave fairly and a stream about to starve goes
ahead of streams with audio in hand. A cancelled job is skipped before it starts
and abandoned between the chunks an engine yields.

A job is not run to its end in one go either: after each chunk its deadline moves
on by the audio it just delivered, and if another job is now due sooner the running
one goes back on the heap, its engine iterator suspended, and resumes later. With
Piper decoding in windows, one long sentence cannot hold the thread while another
stream runs dry.

Yielding has a price: the job's own client keeps playing while the others run. So a
job yields only when the audio it has in hand outlasts the estimated compute of
everything that would go before it, plus its own next chunk (``can_yield``);
otherwise it first decodes on, building a buffer. When eight streams start at once,
the first no longer runs dry while the other seven get their first audio.

An engine that makes a unit in long runs (Kokoro: nothing is heard until a run ends) is
told before each what compute it may take (``_run_budget``: the tightest slack among the
clients, each one's audio in hand less the turns due before it) and cuts its runs to
fit, between words (``engines/run_pacing.py``): alone, a unit is one run; under load,
runs shrink so that the others are served between them.

Repeated short units come from a ``PhraseCache`` without touching the thread. The
worker also keeps a running estimate of each model's cost, from which
``estimate`` tells a new utterance how long it would wait and whether the thread
has room for one more real-time stream (admission control, in ``session.py``).

Under a memory budget (``memory.py``) the thread checks, before each job's first
chunk and each load, what the service holds against the budget: it bounds the job's
runs, ends the inference process to start again with only the job's parts, or refuses
the job (``memory_budget``).

Events go back to the event loop with ``loop.call_soon_threadsafe``; nothing here
touches asyncio otherwise, and nothing on the event loop runs a model.
"""

from __future__ import annotations

import gc
import heapq
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from rtts.engines.base import EngineError, EngineKind, Memory, Timing, VoiceInfo
from rtts.engines.estimates import fold
from rtts.engines.voices import VoiceRegistry
from rtts.host import memory
from rtts.host.client import Host
from rtts.protocol import ErrorCode
from rtts.sound import audio
from rtts.synthesis.contention import Contention
from rtts.synthesis.jobs import Estimate, Job, JobAudio, JobDone, JobEvent, JobFailed, JobWords
from rtts.synthesis.phrase_cache import Key, PhraseCache
from rtts.synthesis.room import Heard, Stream, Waiting, crowd_hold_s, crowd_ready, when_heard

log = logging.getLogger(__name__)

# A model load shows no progress until it ends; the watchdog allows it this long.
LOAD_GRACE_S = 300.0

Post = Callable[[Callable[[], None]], None]  # runs a callback on the event loop


# Silence of a pause job is sent in chunks this long (ms), one event-loop turn each.
PAUSE_CHUNK_MS = 100
# Seconds of speech per character, for costing a unit before it runs, until measured for
# its engine and language (``_learn``): English text, and Chinese and Japanese (a syllable
# or more a character: ~0.2 s in Kokoro's Mandarin and Japanese voices).
_SPEECH_S_PER_CHAR = 0.065
_SPEECH_S_PER_CJK_CHAR = {"zh": 0.2, "ja": 0.2}
# What a paced run leaves every client beyond the estimates (``_run_budget``): their error,
# sending and playback jitter; and for a long run a share of it, whose cost strays from the
# learned line in proportion (on a box held to 0.6 CPUs a lone Mandarin stream's second
# sentence, 5.67 s of audio, was one run of 2.27 s against a budget of 2.18 s, its listener
# left 0 ms; in another run a stream there ran dry for 0.33 s at the same place).
RUN_GUARD_S = 0.1
RUN_GUARD_SHARE = 0.2
# How much more than it lacks a run may make where a stream waits for it to hold a
# crowd's turn (``_run_budget``): the engine cuts its runs below the budget by its margin,
# and a run that fell short costs another run's fixed part.
HOLD_OVERSHOOT = 1.5
# What an announcement's jobs after its first tell the engine their listeners hold, in
# place of what the clock says (``_lead``); their runs are not paced either
# (``_run_budget``). Each instance makes an announcement's audio itself, and its kiosks
# play in step only if every instance makes the same audio: paced by each box's load,
# Kokoro cut a Mandarin unit into runs two ways, and one instance's audio ran 230 ms
# behind the other's from the second sentence on (stop 44's CI,
# tests/system/test_in_step_across_instances.py). One second: past every engine's "the
# listener is waiting" (Hibari's larger windows start there).
SHARED_LEAD_S = 1.0
# What a yielding job keeps in hand beyond the estimates: their error, the next unit's
# encoder (not yet queued when this one decides), sending and playback jitter. Measured
# with benchmarks/latency.py's Piper paragraph streams on 2 cores: 0.05 s gave gaps at
# 4 streams, 0.15 s at 6, 0.3 s none at 6 (8 exceed the thread: RTF ~0.13 each). A
# larger guard delays the first audio of a stream that arrives while others play.
YIELD_GUARD_S = 0.3
# A bare inference process (Python, numpy, the pipes), anonymous MB: what a restart
# starts from (benchmarks/memory_parts.py: 16 MB of its 33 MB RSS).
CHILD_BASE_MB = 20.0
# A job that needs the inference process restarted waits this long (s) behind jobs
# suspended between their chunks, whose state lives in that process.
MEMORY_WAIT_S = 0.05
# A stream whose job has just ended still counts as on the thread this long: its next
# unit comes back from the event loop a moment later, and a stream waiting for room
# must not take that moment for room (issue 32).
STREAM_GAP_S = 1.0
# How long the thread waits for a stream's next unit, on its way back from the event loop
# after its last one ended, before it starts a job due later than that stream's audio runs
# out: a run, once begun, holds the thread to its end. The next unit comes 4-7 ms after
# (traces of four Mandarin listeners on the 2-core Xeon); without the wait, a Japanese
# stream's second sentence began behind a whole 0.9 s run of another stream that had
# 0.8 s more audio in hand, and its first audio came 80 ms after its listener ran out.
NEXT_UNIT_WAIT_S = 0.03
# About what the thread spends on a piece of a unit of an engine that streams inside one
# (a run of Kokoro's, a window of Piper's) before the most urgent job may go: streams
# of such engines take turns piece by piece, not unit by unit (``room.when_heard``).
PIECE_S = 0.1


def can_yield(slack_s: float, ahead_s: list[float], own_next_s: float, guard_s: float = YIELD_GUARD_S) -> bool:
    """Whether a job whose client runs dry in ``slack_s`` seconds can let jobs costing
    ``ahead_s`` run first and still have its own next chunk (``own_next_s``) in time."""
    return slack_s > sum(ahead_s) + own_next_s + guard_s


@dataclass(order=True)
class _Entry:
    deadline: float
    seq: int
    job: Job | None = field(compare=False, default=None)
    control: Callable[[], None] | None = field(compare=False, default=None)
    # A job put back on the heap between chunks: its suspended iterator and the compute
    # time it has used so far.
    chunks: Iterator[np.ndarray | Timing] | None = field(compare=False, default=None)
    compute_s: float = field(compare=False, default=0.0)
    kept: list[np.ndarray | Timing] | None = field(compare=False, default=None)  # chunks for the phrase cache
    samples: int = field(compare=False, default=0)
    last_chunk_s: float = field(compare=False, default=0.0)  # compute of the latest chunk


class _Ended(NamedTuple):
    """A stream between two of its units: its latest job, when that ended, and what the
    next unit's first run is expected to take (``_run_budget``)."""

    job: Job
    at: float
    turn_s: float


class InferenceWorker:
    def __init__(
        self,
        registry: VoiceRegistry,
        post: Post,
        cache: PhraseCache | None = None,
        host: Host | None = None,
        budget_bytes: int | None = None,
        server_rss: Callable[[], int] = memory.anonymous_bytes,
        server_pending: Callable[[], int] = lambda: 0,
        stream_gap_s: float = STREAM_GAP_S,
        next_unit_wait_s: float = NEXT_UNIT_WAIT_S,
    ):
        """``host``: the inference process the engines use, ended when the last model is
        unloaded (``Host.release``). ``budget_bytes``: the anonymous memory the server
        (``server_rss``: its own, without the response bodies it holds for clients) and
        the inference process together may hold; None: no budget. ``server_pending``:
        what admitted response bodies are still about to take in the server
        (``memory.WholeBodies``), counted as taken. ``stream_gap_s``: STREAM_GAP_S;
        ``next_unit_wait_s``: NEXT_UNIT_WAIT_S."""
        self._registry = registry
        self._post = post
        self._host = host
        self.cache = cache if cache is not None else PhraseCache(0)
        # Running estimates by engine kind, from each kind's priors until measured here:
        # compute/audio, load seconds, compute per character before a unit's first chunk
        # (measured per engine and language, "kokoro:zh", the kind's prior until then).
        kinds = registry.kinds
        self._streams = {k.name: k.streams_in_unit for k in kinds}
        self.rtf = {k.name: k.costs.rtf for k in kinds}
        # The same per language ("kokoro:zh"), once a unit of it has run: Kokoro's Mandarin
        # costs more a second of audio than its English (0.37-0.52 against 0.28-0.43 here),
        # and two Mandarin streams let in at the engine's mean underran.
        self.lang_rtf: dict[str, float] = {}
        # The same from an utterance's opening units alone: made in short runs (the quick
        # start, then runs cut to share the thread with the streams let in beside it), they
        # cost more a second of audio than the later ones (Mandarin by Kokoro's own
        # generator, six and eight listeners: 0.19-0.23 against 0.15-0.19), and the streams
        # held back for room, told by the two together, were let in about 1 s later than
        # told, the streams ahead of them still on their opening units (docs/benchmarks.md,
        # "What a held-back stream is told"). A held-back stream is told them at this.
        self.opening_rtf: dict[str, float] = {}
        self.load_s = {k.name: k.costs.load_s for k in kinds}
        self.first_s_per_char = {k.name: k.costs.first_s_per_char for k in kinds}
        # Compute a new stream of an engine that streams inside a unit (Piper's windows)
        # holds the thread for before it may yield: not its first window alone but the
        # windows that buy it the audio to let others go (``_turn_cost``), by engine.
        self.opening_turn_s: dict[str, float] = {}
        # Measured per engine and language ("kokoro:zh"): a Chinese character is a syllable,
        # an English one a fraction of one, so one figure per engine misjudges both.
        self.audio_s_per_char: dict[str, float] = {}
        # The memory budget: each kind's priors, each part's measured size (MB, by part:
        # a model key, or "model:lang" for a language's front end), the front ends loaded
        # in the current inference process, most recently used last.
        self.budget_bytes = budget_bytes
        self._server_rss = server_rss
        self._server_pending = server_pending
        self._memory = {k.name: k.costs.memory for k in kinds}  # by kind; see _memory_of
        self._first_unit_chars = {k.name: k.first_unit_chars for k in kinds}  # a preload's run (_run_mb_of)
        self.part_mb: dict[str, float] = {}
        self._front_ends: OrderedDict[str, float] = OrderedDict()
        self._front_ends_of = 0  # the host generation they were loaded in
        self.recent: OrderedDict[tuple[str, str], None] = OrderedDict()  # (model, lang) by last use
        self.memory_restarts = 0
        self.memory_refusals = 0
        self.bounded_runs = 0
        # The resident parts (MB) as of the thread's last step: replaced, never changed in
        # place, for /readyz and /metrics on the event loop.
        self.parts: dict[str, float] = {}
        self._current_entry: _Entry | None = None
        self._current_since = 0.0
        self._heap: list[_Entry] = []
        # Streams' first jobs waiting for room (Job.room), first come first served, and
        # when each stream's latest job ended (the streams between two of their units).
        self._waiting: list[Job] = []
        self._gap_s = stream_gap_s
        self._next_unit_s = next_unit_wait_s
        self._ended: dict[tuple[str, object], _Ended] = {}
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="rtts-inference", daemon=True)
        self._control_seq = 0
        # Progress marks for the watchdog and /metrics; written by the thread only.
        self.last_progress = time.monotonic()
        self.current: Job | None = None
        self.idle = False  # waiting for work
        # Models being loaded. Replaced, never changed in place: /readyz reads it on the
        # event loop while this thread loads.
        self.loading: frozenset[str] = frozenset()
        self.jobs_done = 0
        self.jobs_skipped = 0
        self.busy_s = 0.0
        self.loads = 0
        self.unloads = 0
        self.requeues = 0
        self.held_on = 0  # chunks a job decoded on instead of yielding, to keep its client fed
        # The time streams waited for room, and of it the thread's idle time (/metrics).
        self.contention = Contention()

    # ------------------------------------------------------------ event-loop side

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            for entry in self._heap:
                if entry.job is not None:
                    entry.job.cancelled = True
            for job in self._waiting:
                job.cancelled = True
            self._cond.notify()
        self._thread.join(timeout)

    def submit(self, job: Job) -> None:
        if job.pause_ms:
            self._pause(job)
            self._off_thread(job)
            return
        if self.cache.cacheable(job.text):
            cached = self.cache.get(self._cache_key(job))
            if cached is not None:
                self._replay(job, cached)
                self._off_thread(job)
                return
        with self._cond:
            if job.room is not None:
                self._waiting.append(job)
                self._admit()
            else:
                heapq.heappush(self._heap, _Entry(job.deadline, job.seq, job))
            self._cond.notify()

    def _off_thread(self, job: Job) -> None:
        """``job`` is answered without the thread (the phrase cache, a pause): where it is its
        stream's last, the stream leaves the thread at once, as after a last unit made there
        (``_ended_job``). Left there, it counted as between two units for STREAM_GAP_S, and a
        stream waiting for room waited as long with the thread idle: 1.0 s of a 1.4 s wait in
        a live test whose long stream ended in sentences it had said before."""
        if job.last:
            self._ended_job(job)
            with self._cond:
                self._admit()
                self._cond.notify()

    def _admit(self) -> None:
        """Streams waiting for room go to the thread, first come first, while there is
        room for the next one: none there, or the load of the streams there with its own
        at most its ``room`` and the audio each holds enough for the crowd it makes
        (``room.crowd_ready``). Called with the lock held."""
        self._waiting = [j for j in self._waiting if not j.cancelled]
        while self._waiting:
            job = self._waiting[0]
            entries, current = self._live()  # the lock is reentrant (Condition's RLock)
            busy = self._busy(entries, current)
            if busy and not self._fits(job, busy, entries, current):
                break
            self._waiting.pop(0)
            heapq.heappush(self._heap, _Entry(job.deadline, job.seq, job))
        self.contention.note(time.monotonic(), waiting=bool(self._waiting))

    def _fits(
        self, job: Job, busy: dict[tuple[str, object], Job], entries: list[_Entry], current: _Entry | None
    ) -> bool:
        """Whether ``job``'s stream may go to the thread beside the streams there (``busy``):
        by load, and by the audio held by those with a unit queued or running. One between
        two units is not waited for: an ``append`` stream's next text may be seconds away,
        its listener's audio run out meanwhile, and newcomers held back for it in vain
        (2.3 s p50 later than told, where a crowd of four counted it)."""
        hold = self._crowd_hold_s(job, busy)
        if hold is None:
            return False
        now = time.monotonic()
        queued = [e.job for e in [*entries, *([current] if current is not None else [])] if e.job is not None]
        return crowd_ready([j.deadline - now for j in queued], hold)

    def _crowd_hold_s(self, job: Job, busy: dict[tuple[str, object], Job]) -> float | None:
        """The audio each stream there with a unit must hold before ``job``'s goes in
        beside them (``room.crowd_hold_s``); None where it does not fit by load."""
        there = list(busy.values())
        rtfs = [self._stream_rtf(j) for j in (*there, job)]
        if sum(rtfs) > (job.room or 0.0):
            return None
        return crowd_hold_s(rtfs, [self._overhead_s(j) for j in (*there, job)], self._first_s(job))

    def _overhead_s(self, job: Job) -> float:
        """Compute seconds of the fixed part of one of ``job``'s stream's runs, where its
        engine makes units in runs that have one (``run_overhead_s``, Kokoro's): at its
        costliest voice."""
        costs = []
        for voice, lang in [(job.voice, job.lang), *((v, v.langs[0]) for v in job.voices)]:
            overhead = getattr(self._registry.engines.get(voice.model), "run_overhead_s", None)
            costs.append(overhead(lang, _generator(job)) if overhead is not None else 0.0)
        return max(costs)

    def _replay(self, job: Job, chunks: tuple[np.ndarray | Timing, ...]) -> None:
        """Answer a job from the phrase cache, on the event loop, without queueing."""
        for chunk in chunks:
            self._emit(job, JobWords(chunk.spoken) if isinstance(chunk, Timing) else JobAudio(chunk))
        self._emit(job, JobDone(0.0))

    def _pause(self, job: Job) -> None:
        """A pause job: silence in chunks of PAUSE_CHUNK_MS, one event-loop turn each, like
        the chunks of speech; the inference thread has nothing to do for it."""
        chunks = audio.silence_chunks(job.pause_ms, job.voice.native_rate, PAUSE_CHUNK_MS)

        def turn() -> None:
            if job.cancelled or job.sink is None:
                return
            chunk = next(chunks, None)
            job.sink(job, JobDone(0.0) if chunk is None else JobAudio(chunk))
            if chunk is not None:
                self._post(turn)

        self._post(turn)

    def estimate(self, job: Job, room: float | None = None) -> Estimate:
        """What ``job`` may expect if submitted now: seconds until it starts, the load of
        the thread with it, seconds until its first audio.

        Both times are the model load if the model is not in memory and the thread played
        forward (``room.when_heard``): the running job until it can yield, the queued ones
        due before it, and then its first run. The load is the sum of the RTFs of every
        utterance with work queued or running, this one included: above 1 the thread
        cannot keep all of them playing in real time (an utterance alone counts 0: it
        delays nobody). With ``room`` (the job would wait for room, ``Job.room``) and a
        load above it, it goes to the thread once the streams there leave it room.
        """
        now = time.monotonic()
        voice = job.voice
        if self.cache.cacheable(job.text) and self.cache.peek(self._cache_key(job)):
            return Estimate(0.0, 0.0, 0.0)
        engine = self._registry.engines.get(voice.model)
        loading = self.load_s.get(voice.engine, 2.0) if engine is not None and not engine.loaded else 0.0
        entries, current = self._live()
        busy = self._busy(entries, current)
        # The streams waiting ahead go in before it, first come first: one that fits by
        # load may be waiting for the audio the crowd needs (``_fits``), and left out, the
        # next stream was not told it waits for room (``start.queued``) though it did.
        with self._cond:
            ahead = sum(self._stream_rtf(j) for j in self._waiting if not j.cancelled)
        load = self._stream_rtf(job) + self._load_of(busy) + ahead
        bound = room if room is not None and busy else math.inf  # it may wait for room, or goes now
        heard = self._when_heard(job, bound, entries, current, now)
        if not busy:
            # Alone on the thread it delays nobody, and refusing it would keep a cost
            # estimate from a bad moment forever: estimates only move when jobs run. So
            # no --admission-max-load makes it late.
            load = 0.0
        return Estimate(loading + heard.start_s, load, loading + heard.audio_s)

    def _first_s(self, job: Job) -> float:
        """Compute seconds from a job's start to its first audio: its first run (Kokoro's
        quick start, a Piper window), at most the whole unit."""
        return min(self._first_s_per_char(job) * len(job.text) / job.speed, self._cost(job))

    def _when_heard(self, job: Job, room: float, entries: list[_Entry], current: _Entry | None, now: float) -> Heard:
        """When ``job`` goes to the thread (waiting for ``room`` behind the streams already
        waiting), when the thread starts on it and when its first audio is made: each
        stream there by what it still has to say (its queued or running unit's compute
        left and the rest of its utterance, ``Job.rest_chars``), the audio it holds, its
        first run if it has not started, and how long it holds the thread at a time."""
        left: dict[tuple[str, object], Stream] = {}
        with self._cond:
            gap = [e.job for e in self._ended.values() if now - e.at < self._gap_s]
            ahead = [self._as_waiting(j, j.room or 0.0) for j in self._waiting if not j.cancelled]
        for j in gap:
            # Its next unit is on its way back from the session; it holds what its last made.
            holds = max(0.0, j.deadline - now) + self._cost(j) / max(self._stream_rtf(j), 1e-3)
            left[_stream(j)] = Stream(
                self._stream_rtf(j), self._rest_s(j), self._turn_s(j), holds, overhead_s=self._overhead_s(j),
                between=True,
            )
        for entry in [*([current] if current is not None else []), *entries]:
            assert entry.job is not None
            j = entry.job
            this = self._left_s(entry, now, self._told_cost(j))
            running = entry is current
            if entry.chunks is None and not running:
                turn = min(self._first_s(j), this)  # its first run: the quick start's
            else:
                turn = min(this, PIECE_S) if self._in_pieces(j.voice) else this
            left[_stream(j)] = Stream(
                self._stream_rtf(j), this + self._rest_s(j), self._turn_s(j), entry.deadline - now, turn, running,
                self._overhead_s(j),
            )
        return when_heard(list(left.values()), ahead, self._as_waiting(job, room), self._first_s(job))

    def _as_waiting(self, job: Job, room: float) -> Waiting:
        """``job``'s stream as one waiting for ``room`` (``room.when_heard``)."""
        return Waiting(
            self._stream_rtf(job), self._told_cost(job) + self._rest_s(job), room, self._turn_s(job),
            self._overhead_s(job), self._first_s(job),
        )

    def _told_cost(self, job: Job) -> float:
        """``job``'s compute seconds as a stream waiting for room is told them: an opening
        unit at what opening units cost here (``opening_rtf``), never less than its RTF says."""
        key = _cost_key(job.voice, job.lang, job.generator)
        if not job.opens or key not in self.opening_rtf:
            return self._cost(job)
        return self._cost(job) * max(1.0, self.opening_rtf[key] / self._rtf(job.voice, job.lang, job.generator))

    def _turn_s(self, job: Job) -> float:
        """Compute seconds ``job``'s stream holds the thread for at a time: a piece of a
        unit where its engine makes one in pieces, else the whole unit."""
        cost = max(self._cost(job), 1e-3)
        return min(cost, PIECE_S) if self._in_pieces(job.voice) else cost

    def _in_pieces(self, voice: VoiceInfo) -> bool:
        """Whether ``voice``'s engine makes a unit in pieces the thread may go elsewhere
        between: windows (``streams_in_unit``), or runs paced to the other streams'
        audio in hand (``limit_run_compute``, Kokoro's), which under load are short."""
        engine = self._registry.engines.get(voice.model)
        return self._streams.get(voice.engine, False) or hasattr(engine, "limit_run_compute")

    def _left_s(self, entry: _Entry, now: float, cost: float | None = None) -> float:
        """Compute seconds a queued or running entry's job still needs, by estimate (of the
        whole, ``cost``: by default ``_cost``)."""
        assert entry.job is not None
        running = now - self._current_since if entry is self._current_entry else 0.0
        return max(0.0, (self._cost(entry.job) if cost is None else cost) - entry.compute_s - running)

    def _rest_s(self, job: Job) -> float:
        """Compute seconds of what ``job``'s utterance says after it (as far as it is known):
        its Chinese and Japanese characters at the costliest of its voices for those
        languages, the rest at the costliest of its others (where it has none of one kind,
        at the costliest of all). Counted at its costliest voice alone, a mixed stream's
        English letters went at a Chinese character's seconds, and it was told its first
        audio 2.0-2.7 s late (docs/benchmarks.md, "What a held-back stream is told")."""
        pairs = [(job.voice, job.lang), *((v, v.langs[0]) for v in job.voices)]

        def per_char(group: list[tuple[VoiceInfo, str]]) -> float:  # compute seconds a character
            return max(self._rtf(v, lang, job.generator) * self._speech_s_per_char(v.engine, lang) for v, lang in group)

        # The languages read a Han or kana character at a time (``Job.rest_cjk``).
        cjk = [p for p in pairs if p[1] in _SPEECH_S_PER_CJK_CHAR] or pairs
        other = [p for p in pairs if p[1] not in _SPEECH_S_PER_CJK_CHAR] or pairs
        return (job.rest_cjk * per_char(cjk) + (job.rest_chars - job.rest_cjk) * per_char(other)) / job.speed

    def capacity(self, max_load: float) -> dict[str, object]:
        """What the thread can carry by this box's measurements (issue 32), for /readyz: per
        engine its real-time factor and ``streams``; ``load`` now and the streams ``waiting``
        for room."""
        engines = {name: {"rtf": round(rtf, 4), "streams": self.streams(name, max_load)}
                   for name, rtf in sorted(self.rtf.items())}
        return {"max_load": max_load, "load": round(self.load(), 4), "waiting": self.waiting, "engines": engines}

    def streams(self, engine: str, max_load: float) -> int:
        """Streams of ``engine`` the thread keeps playing at once within ``max_load`` (the
        admission bound, ``--admission-max-load``) at its real-time factor (compute seconds
        per second of audio, learned as units run) in its costliest language; one at least:
        a stream alone is never late by load."""
        costliest = max([self.rtf.get(engine, 1.0), *(v for k, v in self.lang_rtf.items() if k.split(":")[0] == engine)])
        return max(1, math.floor(max_load / max(costliest, 1e-3)))

    def load(self) -> float:
        """The streams with work on the thread now, their real-time factors summed."""
        return self._load_of(self._busy(*self._live()))

    def thread_load(self, job: Job) -> tuple[float, int]:
        """``load`` with ``job``'s stream (whose last unit may have just left the thread),
        and how many other streams make it."""
        busy = self._busy(*self._live())
        busy[_stream(job)] = job
        return self._load_of(busy), len(busy) - 1

    def _load_of(self, busy: dict[tuple[str, object], Job]) -> float:
        return sum(self._stream_rtf(j) for j in busy.values())

    def _live(self) -> tuple[list[_Entry], _Entry | None]:
        """The queued entries with a job still wanted, and the running one (None: none)."""
        with self._cond:
            entries = [e for e in self._heap if e.job is not None and not e.job.cancelled]
            current = self._current_entry
        if current is None or current.job is None or current.job.cancelled:
            current = None
        return entries, current

    def _busy(self, entries: list[_Entry], current: _Entry | None) -> dict[tuple[str, object], Job]:
        """The streams on the thread, and their voices: those with a job queued or running,
        and those whose job ended less than STREAM_GAP_S ago (their next unit is on its
        way), by ``_stream``."""
        now = time.monotonic()
        with self._cond:
            busy = {key: e.job for key, e in self._ended.items() if now - e.at < self._gap_s}
        for entry in [*entries, *([current] if current is not None else [])]:
            assert entry.job is not None
            busy[_stream(entry.job)] = entry.job
        return busy

    def _stream_rtf(self, job: Job) -> float:
        """What ``job``'s stream costs the thread a second of its audio: its costliest voice's
        RTF (a unit in English and Mandarin holds the thread as its Mandarin does)."""
        generator = job.generator
        return max([self._rtf(job.voice, job.lang, generator), *(self._rtf(v, v.langs[0], generator) for v in job.voices)])

    def _rtf(self, voice: VoiceInfo, lang: str, generator: str | None = None) -> float:
        """The RTF of ``voice``'s engine in ``lang`` (with ``generator`` where the client
        named one) as measured here, else the engine's."""
        return self.lang_rtf.get(_cost_key(voice, lang, generator), self.rtf.get(voice.engine, 1.0))

    def _cost(self, job: Job) -> float:
        """Estimated compute seconds for a job, before it has run."""
        return self._rtf(job.voice, job.lang, job.generator) * len(job.text) * self._audio_s_per_char(job) / job.speed

    def _audio_s_per_char(self, job: Job) -> float:
        return self._speech_s_per_char(job.voice.engine, job.lang)

    def _speech_s_per_char(self, engine: str, lang: str) -> float:
        prior = _SPEECH_S_PER_CJK_CHAR.get(lang, _SPEECH_S_PER_CHAR)
        return self.audio_s_per_char.get(f"{engine}:{lang}", prior)

    def _first_s_per_char(self, job: Job) -> float:
        return self._first_s_per_char_of(job.voice, job.lang, job.generator)

    def _first_s_per_char_of(self, voice: VoiceInfo, lang: str, generator: str | None = None) -> float:
        key = _cost_key(voice, lang, generator)
        return self.first_s_per_char.get(key, self.first_s_per_char.get(voice.engine, 0.05))

    def first_audio_s(self, voice: VoiceInfo, lang: str, text: str) -> tuple[float, float]:
        """(compute seconds before ``voice`` has its first audio of ``text`` on a free
        thread, its model's load included; seconds of audio ``text`` makes), by this box's
        measurements: whether a mixed-language utterance's quick opening part would run out
        before the slower voice after it begins (``Session``, issue 32)."""
        engine = self._registry.engines.get(voice.model)
        loading = self.load_s.get(voice.engine, 2.0) if engine is not None and not engine.loaded else 0.0
        compute = loading + self._first_s_per_char_of(voice, lang) * len(text)
        return compute, self._speech_s_per_char(voice.engine, lang) * len(text)

    def next_run_s(self, voice: VoiceInfo, lang: str, text: str, generator: str | None = None) -> float:
        """Compute seconds of ``voice``'s first run of ``text`` where it follows another
        voice's part (a mixed utterance's change of voice; ``Job.next_first_s``): its
        engine's shortest paced run where it paces runs (Kokoro's ``least_run_s``, by the
        ``generator`` the client named: the student's run costs a fifth of the teacher's),
        for the thread paces that run too, and never more than its first audio on a free
        thread."""
        compute, _ = self.first_audio_s(voice, lang, text)
        least = getattr(self._registry.engines.get(voice.model), "least_run_s", None)
        return min(compute, least(lang, generator)) if least is not None else compute

    @staticmethod
    def _cache_key(job: Job) -> Key:
        return PhraseCache.key(
            job.voice.id, job.lang, job.speed, job.text, job.words, job.shared is not None, _generator(job)
        )

    def drop(self, job: Job) -> None:
        """Cancel a job; if queued it is skipped, if running it stops at the next chunk."""
        job.cancelled = True

    def preload(
        self, model: str, on_done: Callable[[bool], None] | None = None, *, urgent: bool = True, lang: str = ""
    ) -> None:
        """Load a model ahead of need, before any queued job; or, not ``urgent`` (a
        client connected and may ask for another voice), only once no job is queued, so
        a first request for another model does not wait for this one's load.

        ``on_done(loaded)`` is then posted to the event loop. ``lang``: the language the
        load is for, whose front end the memory budget counts too.
        """

        def action() -> None:
            ok = self._preload(model, lang)
            if on_done is not None:
                self._post(lambda: on_done(ok))

        self._control(action, float("-inf") if urgent else float("inf"))

    def last_used(self, default: str) -> str:
        """The model of the most recent job (what the next client probably wants), else ``default``."""
        return next(reversed(self.recent))[0] if self.recent else default

    def progress_age(self, now: float | None = None) -> float:
        """Seconds since the thread last showed it is alive: 0 while it waits for work; a
        model load in progress counts as alive for up to LOAD_GRACE_S."""
        if self.idle:
            return 0.0
        now = time.monotonic() if now is None else now
        age = now - self.last_progress
        return max(0.0, age - LOAD_GRACE_S) if self.loading else age

    def unload_all(self, spare: bool = False) -> None:
        """Unload every model (the idle unload); with ``spare``, a bare inference process
        is started again at once for the next request (``Host.prestart``)."""
        self._control(lambda: self._unload_all(spare=spare))

    def prestart(self) -> None:
        """Have a bare inference process ready for the first load (``Host.prestart``),
        started by this thread, the one that makes the host's calls."""
        host = self._host
        if host is not None:
            self._control(host.prestart)

    def warm_up(self, kinds: list[EngineKind]) -> None:
        """Let engine kinds prepare ahead of their first request (``EngineKind.warm_up``):
        every front end without a budget; under one, those that fit, the most recently
        used first."""
        host = self._host
        if host is None:
            return
        # A warmed front end is not counted as resident until a job has used it: until
        # then a plan counts it as still to load (it may be loading), which errs on the
        # safe side.
        cache = self._registry.cache_dir
        for kind in kinds:
            self._control(lambda kind=kind: kind.warm_up(host, self._warm_langs(kind), cache))  # type: ignore[misc]

    def _model_of(self, kind: EngineKind) -> str:
        """The model of ``kind`` used last (or its first): where its front ends are counted."""
        models = {v.model for v in self._registry.voices.values() if v.engine == kind.name}
        return next((m for (m, _) in reversed(self.recent) if m in models), min(models, default=""))

    def _warm_langs(self, kind: EngineKind) -> tuple[str, ...]:
        """The front ends worth loading ahead: those of the languages this service spoke
        lately (after an idle unload, clients go on in their language), most recent
        first; on a fresh service the kind's first (Kokoro's: Mandarin). Warming the
        others would only take the CPU an English wake needs (its Hibari load and first
        run share the inference process with the warm-up). Under a budget, those that fit."""
        own = [lang for lang, _ in kind.costs.memory.front_ends_mb]
        recent = [lang for (_, lang) in reversed(self.recent) if lang in own]
        langs = list(dict.fromkeys(recent)) if self.recent else own[:1]
        if self.budget_bytes is None or self._host is None:
            return tuple(langs)
        model = self._model_of(kind)
        mem = self._memory_of(model, kind.name)
        used = self._used_mb() + (0 if self._resident_mb().get(model) else self.part_mb.get(model, mem.model_mb))
        room = self.budget_bytes / memory.MB - used - (mem.min_run_mb or mem.run_mb)
        chosen = []
        for lang in langs:
            name = f"{model}:{lang}"
            mb = 0.0 if name in self._resident_mb() else self._front_end_mb(mem, model, lang)
            if mb <= room:
                room -= mb
                chosen.append(lang)
        return tuple(chosen)

    def call(self, action: Callable[[], None], on_done: Callable[[BaseException | None], None]) -> None:
        """Run ``action`` on the inference thread before any queued job; ``on_done(error)``
        is then posted to the event loop (error None when it returned)."""

        def run() -> None:
            try:
                action()
            except Exception as exc:  # handed to the caller
                # Bound now: Python unbinds ``exc`` when the except block ends, before the
                # loop runs the callback (a NameError there, and the error lost).
                self._post(lambda error=exc: on_done(error))
                return
            self._post(lambda: on_done(None))

        self._control(run)

    @property
    def queue_depth(self) -> int:
        with self._cond:
            return sum(1 for e in self._heap if e.job is not None and not e.job.cancelled)

    def contended(self) -> tuple[float, float]:
        """Seconds at least one stream waited for room, and of those the thread was idle."""
        with self._cond:
            return self.contention.totals(time.monotonic())

    @property
    def waiting(self) -> int:
        """Streams waiting for room (``Job.room``)."""
        with self._cond:
            return sum(1 for j in self._waiting if not j.cancelled)

    # ------------------------------------------------------------ thread side

    def _control(self, action: Callable[[], None], deadline: float = float("-inf")) -> None:
        with self._cond:
            # Control work sorts before every job (deadline -inf) in arrival order; work
            # that may wait (+inf) after every job.
            self._control_seq += 1
            heapq.heappush(self._heap, _Entry(deadline, self._control_seq, control=action))
            self._cond.notify()

    def _next(self) -> _Entry | None:
        with self._cond:
            self._admit()
            while not self._stopping:
                if self._heap:
                    wait = self._held_back_s()
                    if wait is None:
                        break
                else:
                    # A stream waiting for room is looked at again once the gap after the
                    # last job has passed (that stream may have ended).
                    wait = self._gap_s / 4 if self._waiting else 5.0
                self.idle = True
                self.contention.note(time.monotonic(), idle=True)
                self._cond.wait(timeout=wait)
                self.idle = False
                self.contention.note(time.monotonic(), idle=False)
                self.last_progress = time.monotonic()
                self._admit()
            if self._stopping:
                return None
            return heapq.heappop(self._heap)

    def _held_back_s(self) -> float | None:
        """How long the top of the heap waits; None to run it now. Called with the lock held.

        Work that waits for a quiet thread (a load no one asked for yet:
        ``preload(urgent=False)``) waits until no stream is between two of its units: the
        queue is empty for the moment the next one takes to come from the event loop,
        and a speculative load of the default voice (Hibari, 0.4 s) taken there made a
        Mandarin stream's second unit 0.4 s late, an underrun in every fresh server's first
        utterance. A job waits up to ``next_unit_wait_s`` for the next unit of a stream whose
        audio runs out before its own, which earliest deadline first puts ahead of it."""
        top = self._heap[0]
        now = time.monotonic()
        if top.control is not None and top.deadline == float("inf"):
            due = [e.at + self._gap_s for e in self._ended.values() if now - e.at < self._gap_s]
            return max(due) - now if due else None
        if top.job is None:
            return None
        due = [e.at + self._next_unit_s for e in self._between_units(now, self._next_unit_s)
               if e.job.deadline < top.deadline]
        return max(due) - now if due else None

    def _between_units(self, now: float, within_s: float, besides: Job | None = None) -> list[_Ended]:
        """The streams between two of their units: their latest job ended less than
        ``within_s`` ago and was not cancelled, and their next is not on the heap yet (nor
        ``besides``, the job running). Called with the lock held."""
        recent = [(key, e) for key, e in self._ended.items() if now - e.at < within_s and not e.job.cancelled]
        if not recent:  # the common case, checked on every turn of the thread
            return []
        there = {_stream(e.job) for e in self._heap if e.job is not None}
        if besides is not None:
            there.add(_stream(besides))
        return [e for key, e in recent if key not in there]

    def _run(self) -> None:
        while (entry := self._next()) is not None:
            self.last_progress = time.monotonic()
            try:
                if entry.control is not None:
                    entry.control()
                elif entry.job is not None:
                    self._run_job(entry)
            except Exception:  # the thread must survive anything a model does
                log.exception("inference thread: unexpected failure")
            if entry.job is not None:
                self._ended_job(entry.job, max(self._turn_cost(entry), entry.job.next_first_s))
            self.parts = self._resident_mb()
            self.last_progress = time.monotonic()

    def _ended_job(self, job: Job, turn_s: float = 0.0) -> None:
        """A job is off the thread (done, failed, or back on the heap between chunks, where
        it counts anyway): its stream still counts as there for STREAM_GAP_S, its next
        unit's first run taken to cost ``turn_s``, unless it was its utterance's last or
        was cancelled; older ends are forgotten."""
        now = time.monotonic()
        with self._cond:
            self._ended = {k: v for k, v in self._ended.items() if now - v.at < self._gap_s}
            key = _stream(job)
            if job.last or job.cancelled:
                self._ended.pop(key, None)
            else:
                self._ended[key] = _Ended(job, now, turn_s)

    def _load(self, model: str) -> None:
        engine = self._registry.engines[model]
        if engine.loaded:
            return
        self.last_progress = time.monotonic()
        self.loading = self.loading | {model}
        t0 = time.perf_counter()
        host = self._host
        before = host.anonymous_bytes() if host is not None else 0
        kind = next((v.engine for v in self._registry.voices.values() if v.model == model), "")
        try:
            engine.load()
            self.loads += 1
            if host is not None:
                # What the load added; a first load also started the inference process.
                # Never below the engine's own figure: that includes what grows after the
                # load (Hibari's OOV net and DSP on their first run: +30 MB).
                added = (host.anonymous_bytes() - before) / memory.MB - (0 if before else CHILD_BASE_MB)
                self.part_mb[model] = max(added, self._memory_of(model, kind).model_mb)
            took = time.perf_counter() - t0
            if kind:
                self.load_s[kind] = took
            log.info("loaded %s in %.2f s", model, took)
        except EngineError as exc:
            log.error("cannot load %s: %s", model, exc)
            raise
        finally:
            self.loading = self.loading - {model}

    def _preload(self, model: str, lang: str = "") -> bool:
        voice = next((v for v in self._registry.voices.values() if v.model == model), None)
        if voice is None:
            return False
        fit = self._plan(voice, lang, preload=True)
        if fit is not None and (not fit.fits or fit.restart):
            # A preload never makes room: what is loaded serves someone, and the job it is
            # for makes the room itself, once, instead of after a load made for nothing.
            return False
        try:
            self._load(model)
        except EngineError:
            return False  # already logged; the job that needs it will report engine_unavailable
        return True

    def _unload_all(self, why: str = "idle", spare: bool = False) -> None:
        dropped = [key for key, engine in self._registry.engines.items() if engine.loaded]
        for key in dropped:
            self._registry.engines[key].unload()
        gc.collect()  # the sessions' finalizers tell the host which ones are gone
        if self._host is not None:
            self._host.release()
            if spare:
                self._host.prestart()
        self._front_ends.clear()
        if dropped:
            self.unloads += 1
            log.info("%s: unloaded %s", why, ", ".join(dropped))

    # ------------------------------------------------------------ the memory budget

    def resident_parts(self) -> dict[str, float]:
        """The parts in the inference process (MB), as of the thread's last step (any thread)."""
        return self.parts

    def _used_mb(self) -> float:
        """What the service holds now: the server's and the inference process's anonymous
        memory, and what bodies already admitted are about to add in the server."""
        child = self._host.anonymous_bytes() if self._host is not None else 0
        return (self._server_rss() + self._server_pending() + child) / memory.MB

    def _front_end_mb(self, mem: Memory, model: str, lang: str) -> float:
        return self.part_mb.get(f"{model}:{lang}", dict(mem.front_ends_mb).get(lang, 0.0))

    def _note_front_end(self, name: str, mb: float) -> None:
        host = self._host
        generation = host.generation if host is not None else 0
        if generation != self._front_ends_of:
            self._front_ends.clear()
            self._front_ends_of = generation
        self._front_ends[name] = mb
        self._front_ends.move_to_end(name)

    def _resident_mb(self) -> dict[str, float]:
        """The parts loaded in the inference process now, with their sizes (MB)."""
        host = self._host
        if host is None or not host.running:
            return {}
        out = {}
        for key, engine in self._registry.engines.items():
            if engine.loaded:
                kind = next((v.engine for v in self._registry.voices.values() if v.model == key), "")
                out[key] = self.part_mb.get(key, self._memory_of(key, kind).model_mb)
        if host.generation == self._front_ends_of:
            out.update(self._front_ends)
        return out

    def _memory_of(self, model: str, kind: str) -> Memory:
        """What ``model`` (of engine kind ``kind``) holds until measured: its engine's own
        figures where they depend on how it was made (``Engine.memory``: Kokoro's runs
        with the distilled generator add a tenth of its own's), else its kind's."""
        own = getattr(self._registry.engines.get(model), "memory", None)
        return own if isinstance(own, Memory) else self._memory.get(kind, Memory())

    def _needed_mb(self, voice: VoiceInfo, lang: str, generator: str | None = None) -> dict[str, float]:
        mem = self._memory_of(voice.model, voice.engine)
        needed = {voice.model: self.part_mb.get(voice.model, mem.model_mb)}
        if lang in dict(mem.front_ends_mb):
            needed[f"{voice.model}:{lang}"] = self._front_end_mb(mem, voice.model, lang)
        # A generator the client named that the load did not open (Kokoro's teacher on a
        # server that speaks the student, or the other way round) opens on first use.
        other = getattr(self._registry.engines.get(voice.model), "generator_part", None)
        part = other(lang, generator) if generator is not None and other is not None else None
        if part is not None:
            name, mb = part
            needed[f"{voice.model}:{name}"] = self.part_mb.get(f"{voice.model}:{name}", mb)
        return needed

    def _plan(
        self, voice: VoiceInfo, lang: str, preload: bool = False, generator: str | None = None, chars: int | None = None
    ) -> memory.Plan | None:
        """How the job (a unit of ``chars`` characters; or, ``preload``, the model alone
        with one short run) fits the budget; None without one."""
        if self.budget_bytes is None or self._host is None:
            return None
        run_mb, least = self._run_mb_of(voice, lang, generator, chars)
        # Its own memory only: bodies held for clients come and go, and a voice that
        # fits alone must not be refused for them (mid-utterance, after its audio).
        server = self._server_rss() / memory.MB
        return memory.plan(
            self.budget_bytes / memory.MB, self._used_mb(), self._resident_mb(),
            self._needed_mb(voice, lang, generator), least if preload else run_mb, least, server + CHILD_BASE_MB,
        )

    def _run_mb_of(
        self, voice: VoiceInfo, lang: str, generator: str | None, chars: int | None = None
    ) -> tuple[float, float]:
        """(the most one run of ``voice`` in ``lang`` adds, the least it can be held to), MB:
        its engine's figures for the generator that speaks (``run_memory``: Kokoro's
        distilled one's runs add a tenth of its own's), else its memory's, for a unit of
        ``chars`` characters where its runs grow with their unit (``Memory.unit_run_mb``;
        None: its first unit, the short run a preload plans for)."""
        own = getattr(self._registry.engines.get(voice.model), "run_memory", None)
        if own is not None:
            return own(lang, generator)
        mem = self._memory_of(voice.model, voice.engine)
        most = mem.unit_run_mb(chars if chars is not None else self._first_unit_chars.get(voice.engine, 0))
        return most, (most if mem.min_run_mb is None else mem.min_run_mb)

    def _make_room(self, entry: _Entry) -> bool:
        """Before a job's first chunk: fit it in the budget. False when it must wait
        (requeued) or was refused (failed); True to run it."""
        job = entry.job
        assert job is not None
        fit = self._plan(job.voice, job.lang, generator=_generator(job), chars=len(job.text))
        engine = self._registry.engines[job.voice.model]
        if fit is None:
            return True
        log.debug("memory: %s %s: %s (holding %.0f MB: %s)", job.voice.id, job.lang, fit, self._used_mb(),
                  self._resident_mb())
        if not fit.fits:
            self.memory_refusals += 1
            budget = self.budget_bytes / memory.MB if self.budget_bytes else 0
            log.warning("voice %s (%s) does not fit the memory budget of %.0f MB", job.voice.id, job.lang, budget)
            self._emit(job, JobFailed(
                ErrorCode.MEMORY_BUDGET.value,
                f"voice {job.voice.id} does not fit the memory budget ({budget:.0f} MB) even alone",
            ))
            return False
        if fit.restart:
            with self._cond:
                suspended = [e for e in self._heap if e.chunks is not None and e.job is not None and not e.job.cancelled]
                if suspended:
                    # Their state lives in the inference process: they finish their units first.
                    entry.deadline = max(e.deadline for e in suspended) + MEMORY_WAIT_S
                    heapq.heappush(self._heap, entry)
                    self._cond.notify()
                    return False
            self.memory_restarts += 1
            self._unload_all(f"memory budget ({job.voice.id}, {job.lang})")
            if self._host is not None:
                self._host.stop()
        if fit.run_mb is not None:
            self.bounded_runs += 1
        engine.limit_run_memory(fit.run_mb)
        return True

    def _note_use(self, job: Job) -> None:
        """The job's parts are in use: remember them (front ends, recency)."""
        key = (job.voice.model, job.lang)
        self.recent[key] = None
        self.recent.move_to_end(key)
        while len(self.recent) > 8:
            self.recent.popitem(last=False)
        for name, mb in self._needed_mb(job.voice, job.lang, _generator(job)).items():
            if name != job.voice.model:  # a front end, or a generator opened for the job
                self._note_front_end(name, mb)
        # Said at once, not after the job: a client that has heard the job's audio (and
        # asks /readyz) finds what was opened for it there.
        self.parts = self._resident_mb()

    def _run_job(self, entry: _Entry) -> None:
        job = entry.job
        assert job is not None
        if job.cancelled:
            self._abandon(entry)
            return
        self.current = job
        self._current_entry = entry
        self._current_since = time.monotonic()
        t0 = time.perf_counter()
        try:
            engine = self._registry.engine_for(job.voice)
            # An engine that makes a unit in runs is told, before each, what compute it may
            # take (run_pacing); an engine outside rtts need not know of it.
            pace = getattr(engine, "limit_run_compute", None)
            if entry.chunks is None:
                if not self._make_room(entry):
                    return
                try:
                    self._load(job.voice.model)
                except EngineError as exc:
                    message = f"voice {job.voice.id} is unavailable: {exc}"
                    self._emit(job, JobFailed(ErrorCode.ENGINE_UNAVAILABLE.value, message))
                    return
                t0 = time.perf_counter()  # the load is not part of this job's RTF
                if pace is not None:  # before synthesize: how its first run is cut reads it
                    pace(self._run_budget(entry))
                lead_s = self._lead(job)
                # Asked for only where wanted: an engine outside rtts need not know of them.
                extra: dict[str, object] = {"words": True} if job.words else {}
                if _generator(job) is not None:
                    extra["generator"] = job.generator
                entry.chunks = iter(engine.synthesize(job.text, job.voice, job.lang, job.speed, lead_s, **extra))
                self._note_use(job)  # synthesize has phonemized: the job's front end is loaded
                if self.cache.cacheable(job.text):
                    entry.kept = []
            elif pace is not None:
                pace(self._run_budget(entry))
            chunk_t0 = time.perf_counter()
            for chunk in entry.chunks:
                if job.cancelled:
                    break
                if isinstance(chunk, Timing):  # words come before the audio they describe
                    self._emit(job, JobWords(chunk.spoken))
                    if entry.kept is not None:
                        entry.kept.append(chunk)
                    continue
                now_pc = time.perf_counter()
                if entry.samples == 0 and job.text:
                    fold(self.first_s_per_char, _cost_key(job.voice, job.lang, job.generator), (now_pc - t0) / len(job.text))
                entry.last_chunk_s = now_pc - chunk_t0
                self._emit(job, JobAudio(chunk))
                entry.samples += len(chunk)
                if entry.kept is not None:
                    entry.kept.append(chunk)
                self.last_progress = now = time.monotonic()
                # The client now holds the frames this chunk completes: the job is due that much later.
                job.deadline = max(job.deadline, now) + job.framed(len(chunk) / job.voice.native_rate)
                if self._yield_to_sooner(entry, time.perf_counter() - t0):
                    return
                if pace is not None:
                    pace(self._run_budget(entry))
                chunk_t0 = time.perf_counter()
            if job.cancelled:
                self._abandon(entry)
                return
            used_s = time.perf_counter() - t0
            self._note_opening_turn(entry, used_s)
            entry.compute_s += used_s
            t0 = time.perf_counter()
            self.jobs_done += 1
            self._learn(job, entry)
            if entry.kept:
                self.cache.put(self._cache_key(job), entry.kept)
            self._emit(job, JobDone(entry.compute_s))
        except EngineError as exc:  # the engine says why (its process died, a voice file is bad): no bug here
            log.error("voice %s failed: %s", job.voice.id, exc)
            self._emit(job, JobFailed(ErrorCode.ENGINE_UNAVAILABLE.value, f"voice {job.voice.id} is unavailable: {exc}"))
            self._close(entry)
        except Exception as exc:
            log.exception("synthesis failed for %s", job.voice.id)
            self._emit(job, JobFailed(ErrorCode.INTERNAL.value, f"synthesis failed ({type(exc).__name__})"))
            self._close(entry)
        finally:
            self.busy_s += time.perf_counter() - t0
            self.current = None
            self._current_entry = None

    def _yield_to_sooner(self, entry: _Entry, used_s: float) -> bool:
        """Put ``entry`` back on the heap if another job is due before it; True if so."""
        job = entry.job
        assert job is not None
        with self._cond:
            if self._waiting:
                # A stream waiting for the crowd's audio may go in now that this chunk is
                # held: looked at only between jobs, it waited for the rest of a sentence
                # made in runs, and streams told they would start at once were heard up to
                # 2.5-3 s later (docs/benchmarks.md, "Let in between two runs").
                self._admit()
            # A cancelled job on top costs nothing: it is skipped as soon as it is popped.
            top = self._heap[0] if self._heap else None
            if top is None or top.deadline >= job.deadline:
                return False
            ahead = [
                self._turn_cost(e)
                for e in self._heap
                if e.job is not None and not e.job.cancelled and e.deadline < job.deadline
            ]
            if not can_yield(job.deadline - time.monotonic(), ahead, self._turn_cost(entry)):
                self.held_on += 1
                return False
            self._note_opening_turn(entry, used_s)
            entry.compute_s += used_s
            entry.deadline = job.deadline
            heapq.heappush(self._heap, entry)
            self.requeues += 1
            self._cond.notify()
        return True

    def _note_opening_turn(self, entry: _Entry, used_s: float) -> None:
        """A stream's first job of an engine that streams inside a unit ends its first turn
        (it yields, or ends having never yielded): what it held the thread for."""
        job = entry.job
        assert job is not None
        if job.opens and entry.compute_s == 0.0 and self._streams.get(job.voice.engine, False):
            fold(self.opening_turn_s, job.voice.engine, used_s)

    def _turn_cost(self, entry: _Entry) -> float:
        """Estimated compute of an entry's next turn: its first chunk if it has not
        started (cost grows with its text), else a few times its latest chunk (Piper's
        windows grow fourfold; the estimate may overshoot the end of a unit), or, for an
        engine whose runs are paced (Kokoro's: ``_run_budget``), a little over it.

        A new stream of an engine that streams inside a unit holds the thread until it has
        the audio to yield, as measured (``opening_turn_s``): with seven Piper listeners
        let in at once, the first yielded with 1.14 s in hand to six newcomers counted at
        their first windows (0.06 s each) that took 0.2 s each, and ran out 0.08 s before
        its turn came back (docs/benchmarks.md, "A stream between two units, seen in a
        trace")."""
        job = entry.job
        assert job is not None
        streams = self._streams.get(job.voice.engine, False)
        if entry.chunks is None:
            first = self._first_s_per_char(job) * len(job.text) / job.speed
            if streams and job.opens:
                return max(first, self.opening_turn_s.get(job.voice.engine, 0.0))
            return first
        return entry.last_chunk_s * (4 if streams else 1.5)

    @staticmethod
    def _lead(job: Job) -> float:
        """Audio the client holds that ``job``'s first chunk may take its time behind: none
        for an utterance's first, whose audio is awaited now; ``SHARED_LEAD_S`` for an
        announcement's others, the same on every instance; else until its deadline."""
        if job.opens:
            return 0.0
        if job.shared is not None:
            return SHARED_LEAD_S
        return max(0.0, job.deadline - time.monotonic())

    def _run_budget(self, entry: _Entry) -> float | None:
        """Seconds of compute the running job's next run may take (``Engine.limit_run_compute``)
        with every client on the thread still holding audio when it ends: its own (the job's
        deadline), and each queued job's after the turns due before it, earliest deadline
        first. Below zero when a client is already waiting (a new one's first audio): the
        engine then makes its shortest run. None (no bound) for an announcement's job: its
        runs are cut the same way on every instance, whatever each one's load
        (``SHARED_LEAD_S``); a long run of it is paid for by the streams beside it."""
        job = entry.job
        assert job is not None
        if job.shared is not None:
            return None
        now = time.monotonic()
        budget = job.deadline - now
        with self._cond:
            turns = [
                (e.deadline, self._turn_cost(e) + self._handover_s(e, now))
                for e in self._heap
                if e.job is not None and not e.job.cancelled
            ]
            # A stream between two units has its next on the way from the event loop: a
            # long run begun in that moment was paced as if it were not there, and its next
            # unit started too late to make its first audio in time (the underruns at the
            # second sentence of streams let in together, docs/benchmarks.md).
            turns += [(e.job.deadline, e.turn_s) for e in self._between_units(now, self._gap_s, besides=job)]
            hold = self._waiting_hold_s()
        ahead = 0.0
        for deadline, turn in sorted(turns):
            ahead += turn
            budget = min(budget, deadline - now - ahead)
        budget -= max(RUN_GUARD_S, RUN_GUARD_SHARE * budget)
        short = hold - (job.deadline - now) if hold is not None else 0.0
        if short > 0:
            # A stream that fits by load waits for this one to hold ``hold``: a run that
            # makes about that much lets it in when it may go. Paced by the others alone,
            # a stream alone on the thread may make the rest of its sentence in one run
            # while the one waiting, told it would start at once, cannot go in.
            budget = min(budget, short * self._stream_rtf(job) * HOLD_OVERSHOOT)
        return budget

    def _handover_s(self, entry: _Entry, now: float) -> float:
        """The next voice's first run for a stream whose job ends with its next turn
        (``Job.next_first_s``): due with that job's deadline, when its audio runs out. Four
        mixed streams let in together each held 0.9 s of English by Hibari, a job done but
        for its end; a Mandarin run of 0.53 s beside them was paced as if nothing more were
        due from them, and the third stream's Mandarin came 0.01 s after its English ran
        out (docs/benchmarks.md, "The change of voice in a crowd")."""
        job = entry.job
        assert job is not None
        if not job.next_first_s or self._left_s(entry, now) > self._turn_cost(entry):
            return 0.0
        return job.next_first_s

    def _waiting_hold_s(self) -> float | None:
        """The audio the first stream waiting needs each stream with a unit on the thread
        to hold before it goes in, where it fits by load and waits for the crowd's audio
        alone; else None. Called with the lock held."""
        waiting = next((j for j in self._waiting if not j.cancelled), None)
        if waiting is None:
            return None
        hold = self._crowd_hold_s(waiting, self._busy(*self._live()))
        return hold if hold else None

    def _learn(self, job: Job, entry: _Entry) -> None:
        """Fold a finished job's measured RTF into the estimate for its engine."""
        audio_s = entry.samples / job.voice.native_rate
        if audio_s < 0.2:
            return  # too short to say anything about the rate
        rtf, key = entry.compute_s / audio_s, _cost_key(job.voice, job.lang, job.generator)
        fold(self.rtf, job.voice.engine, rtf)
        fold(self.lang_rtf, key, rtf)
        if job.opens:
            fold(self.opening_rtf, key, rtf)
        if job.text:
            fold(self.audio_s_per_char, f"{job.voice.engine}:{job.lang}", audio_s * job.speed / len(job.text))

    def _abandon(self, entry: _Entry) -> None:
        self.jobs_skipped += 1
        self._close(entry)

    @staticmethod
    def _close(entry: _Entry) -> None:
        close = getattr(entry.chunks, "close", None)
        if close is not None:
            close()
        entry.chunks = None

    def _emit(self, job: Job, event: JobEvent) -> None:
        sink = job.sink
        if sink is not None:
            self._post(lambda: sink(job, event))


def _stream(job: Job) -> tuple[str, object]:
    """The stream a job is of: its utterance and the session it is for (its sink); ids are
    the clients' own, and two may both send "u1"."""
    return (job.utterance, job.sink)


def _generator(job: Job) -> str | None:
    """The waveform generator ``job``'s client named, where its voice has a choice of them
    (``VoiceInfo.generators``); None: the server's, or a voice with one only."""
    return job.generator if job.voice.generators else None


def _cost_key(voice: VoiceInfo, lang: str, generator: str | None) -> str:
    """What a cost is learned under: the engine and language ("kokoro:zh"), and the
    generator a client named for a voice with a choice ("kokoro:zh:student"): Kokoro's
    distilled generator costs a fifth of its own, and one figure for both would admit
    streams by neither."""
    key = f"{voice.engine}:{lang}"
    return f"{key}:{generator}" if generator and voice.generators else key
