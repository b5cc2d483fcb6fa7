"""Per-connection protocol logic, without sockets or threads (sans-I/O).

``Session.receive`` takes the bytes of one client frame (``handle`` a message made
in this process), ``Session.job_event`` takes what the inference thread reported;
each returns a list of effects (``effects.py``) for the driver (``serve/connection.py``) to
carry out: messages to send, jobs to submit or cancel, a close. An utterance's state is in
``utterance.py``, the languages a request may name in ``languages.py``.
Everything about ordering, ids, limits, framing and stats lives here, so it is
tested without a network (tests/unit/test_session.py).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol as TypingProtocol

import numpy as np

from rtts import protocol, tokens
from rtts.broadcast.announcements import Announcement, Draft
from rtts.config import Config
from rtts.engines.base import Spoken, VoiceInfo
from rtts.protocol import ErrorCode, ProtocolError
from rtts.sound import audio, codecs
from rtts.sound.track import RESAMPLER_HOLD_S, Frame, Track
from rtts.speech import word_timing
from rtts.speech.append_lengths import AppendLengths
from rtts.speech.effects import Close, Drop, Effect, Join, Leave, Post, Send, Submit
from rtts.speech.languages import SPOKEN_LANGS, implied_lang, spoken_lang
from rtts.speech.ratelimit import MessageRate, Verdict
from rtts.speech.utterance import Output, Part, Utterance, says_something, word_unit
from rtts.synthesis.admission_bound import AdmissionBound
from rtts.synthesis.jobs import Estimate, Job, JobAudio, JobDone, JobEvent, JobFailed, JobWords
from rtts.text import markup
from rtts.text.lexicon import Lexicon
from rtts.text.segment import Segment, cjk_chars, segment
from rtts.text.split import Unit, UnitBuffer, pause_ms, split_units

log = logging.getLogger(__name__)


class Catalog(TypingProtocol):
    """What a session needs to know about voices (``voices.VoiceRegistry`` is one)."""

    voices: dict[str, VoiceInfo]
    default_voice: str
    # The voice for each language, for text the chosen voice cannot speak (``voices.routes``).
    lang_voices: dict[str, VoiceInfo]

    def loaded_voices(self) -> list[str]: ...

    def first_unit_chars(self, engine: str, lang: str | None = None) -> int:
        """Longest first unit of an utterance spoken by ``engine`` in ``lang``: it decides the
        time to first audio."""
        ...

    def estimate(self, job: Job, room: float | None = None) -> Estimate:
        """Expected seconds before ``job`` starts, load of the inference thread with it,
        expected seconds before its first audio; with ``room``, a stream that would wait
        for room counts that wait; ``InferenceWorker.estimate``."""
        ...

    def first_audio_s(self, voice: VoiceInfo, lang: str, text: str) -> tuple[float, float]:
        """(compute seconds before ``voice`` has its first audio of ``text`` on a free thread,
        seconds of audio ``text`` makes), by this box's measurements;
        ``InferenceWorker.first_audio_s``."""
        ...

    def next_run_s(self, voice: VoiceInfo, lang: str, text: str, generator: str | None = None) -> float:
        """Compute seconds of ``voice``'s first run of ``text`` after another voice's part,
        paced beside other streams, by ``generator`` where the client named one;
        ``InferenceWorker.next_run_s``."""
        ...

    def capacity(self) -> dict[str, int]:
        """Streams of each engine the inference thread carries at once within the admission
        bound, by this box's measurements; ``InferenceWorker.streams``."""
        ...

    def thread_load(self, job: Job) -> tuple[float, int]:
        """The load on the inference thread now with ``job``'s stream (its streams' RTFs
        summed) and how many other streams it carries; ``InferenceWorker.thread_load``."""
        ...


# The longest pause job (ms): a <break> is sent as silence jobs of at most this length,
# so a client that is behind holds back the rest like it holds back speech.
PAUSE_JOB_MS = 2000
# What an opening part's audio must outlast the next voice's first audio by, beyond the
# estimates, for the two to go out as they come (``Session._outruns``): the estimates'
# error, sending and playback jitter, as the worker's RUN_GUARD_S.
HANDOVER_GUARD_S = 0.1
# A frame counts as late (``end.stats.underruns``) when the client's audio ran out this
# much before it was sent, by what was sent before it: the listeners' strict player in
# benchmarks/latency.py allows the same, the frames of one chunk going out together.
LATE_TOLERANCE_S = 0.005

def _what_follows(utt: Utterance, voice: VoiceInfo, to_come: int = 0) -> tuple[int, int, tuple[VoiceInfo, ...]]:
    """What the worker is told of the stream of the job about to go for ``utt``'s head part
    (issue 32): the characters the utterance says after that part, how many of them are
    Chinese or Japanese, and the other voices it speaks with as far as known (this unit's
    parts, and those the job before named). A stream's load is its costliest voice's, and
    a stream waiting for room is told when the ones ahead of it will have said the rest.
    An ``append`` stream's rest also has the text it holds that is not a unit yet, and
    ``to_come`` characters it is expected to send still (``AppendLengths``), Chinese or
    Japanese in the share its text so far is."""
    parts = [p for p in utt.parts if not isinstance(p, int)]
    after = [p.speak for p in list(utt.parts)[1:] if not isinstance(p, int)] + [u.text for u in utt.units]
    known = {p.voice.id: p.voice for p in parts}
    if utt.job is not None:
        known |= {v.id: v for v in (utt.job.voice, *utt.job.voices)}
    others = tuple(v for v in known.values() if v.id != voice.id)
    chars, cjk = sum(map(len, after)), sum(map(cjk_chars, after))
    if utt.buffer is not None:
        seen = [p.speak for p in parts[:1]] + after
        share = sum(map(cjk_chars, seen)) / max(1, sum(map(len, seen)))
        more = utt.buffer.pending + to_come
        chars, cjk = chars + more, cjk + round(more * share)
    return chars, cjk, others


class Session:
    def __init__(
        self,
        session_id: str,
        config: Config,
        catalog: Catalog,
        clock: Callable[[], float] = time.monotonic,
        authorized: bool = False,
        lexicon: Lexicon | None = None,
        wall: Callable[[], float] = time.time,
        voices_at: str = "ready.voices",
        bound: AdmissionBound | None = None,
        lengths: AppendLengths | None = None,
    ) -> None:
        """``clock``: monotonic seconds, for pacing; ``wall``: the shared clock (Unix
        seconds, ``clock.SharedClock.now``) a pong carries, for clients playing in step;
        ``voices_at``: where this client can look the voices up, as ``unknown_voice`` names it;
        ``bound``: the admission bound every session shares, lowered where a stream underran
        (``admission_bound``; None: this session's own, from ``config``); ``lengths``: what
        the ``append`` streams of every session came to (None: this session's own)."""
        self.id = session_id
        self._bound = bound or AdmissionBound(config.admission_max_load, clock)
        self._lengths = lengths if lengths is not None else AppendLengths()
        self.voices_at = voices_at
        self._config = config
        self._catalog = catalog
        self._lexicon = lexicon or Lexicon({})
        self._clock = clock
        self._wall = wall
        # ``authorized``: the token already came in the handshake (Sec-WebSocket-Protocol).
        self.authorized = config.token is None or authorized
        self.voice = catalog.default_voice
        self.lang: str | None = None
        self.speed = 1.0
        self.words = "none"  # hello.words: protocol.WORD_UNITS
        self.generator: str | None = None  # hello.generator: protocol.GENERATORS; None: the server's
        self.out = Output(config.sample_rate, config.format, config.frame_ms)
        self.utterances: OrderedDict[str, Utterance] = OrderedDict()
        # When the client will have played everything sent so far (monotonic seconds).
        self._play_until = 0.0
        self.closed = False
        self._rate = MessageRate(config.message_rate, config.message_burst, clock)

    # ------------------------------------------------------------ inputs

    def open(self) -> list[Effect]:
        """Effects on connect: ``ready`` at once unless a token must come first."""
        return [Send(self._ready())] if self.authorized else []

    def receive(self, data: bytes | str) -> list[Effect]:
        """A frame from the client."""
        verdict = self._rate.take()  # before decoding: a refused frame costs next to nothing
        if verdict is not Verdict.TAKE:
            return self._over_rate(verdict)
        if isinstance(data, str):
            return self._refused(
                ProtocolError(ErrorCode.BAD_FRAME, "text frames are not accepted; send msgpack in a binary frame")
            )
        try:
            msg = protocol.decode_client(data, max_bytes=self._config.max_message_bytes)
        except ProtocolError as exc:
            return self._refused(exc)
        return self._take(msg)

    def handle(self, msg: protocol.ClientMessage) -> list[Effect]:
        """A message made in this process (``rtts say``, ``/tts``, another protocol's
        adapter), checked as a decoded one would be."""
        try:
            protocol.check(msg)
        except ProtocolError as exc:
            return self._refused(exc)
        return self._take(msg)

    def _take(self, msg: protocol.ClientMessage) -> list[Effect]:
        try:
            if not self.authorized and not isinstance(msg, protocol.Hello):
                raise ProtocolError(ErrorCode.UNAUTHORIZED, "send hello with a valid token first")
            return self._handle(msg)
        except ProtocolError as exc:
            return self._refused(exc)

    def _refused(self, exc: ProtocolError) -> list[Effect]:
        effects: list[Effect] = [self._error(exc.code, exc.message, exc.id)]
        if exc.code == ErrorCode.UNAUTHORIZED or not self.authorized:
            # Before a valid hello, anything wrong ends the connection: a stranger gets no
            # second try at holding a slot.
            effects.append(Close(protocol.CloseCode.POLICY, "unauthorized"))
        return effects

    def _over_rate(self, verdict: Verdict) -> list[Effect]:
        """A frame over limits.message_rate: dropped unread; the client hears of it once, and
        is closed (1008) if it owes a whole burst, having gone on sending regardless."""
        if verdict is Verdict.DROP:
            return []
        rate, burst = self._config.message_rate, self._config.message_burst
        if verdict is Verdict.REFUSE:
            message = (f"over {rate:g} messages a second (after a burst of {burst}): this message and the "
                       "next are dropped until the rate falls; keep on and the connection is closed")
            return [self._error(ErrorCode.RATE_LIMITED, message)]
        message = f"still over {rate:g} messages a second: closing"
        return [self._error(ErrorCode.RATE_LIMITED, message), Close(protocol.CloseCode.POLICY, "rate limited")]

    def job_event(self, job: Job, event: JobEvent) -> list[Effect]:
        utt = self.utterances.get(job.utterance)
        if utt is None or utt.job is not job or job.cancelled:
            return []  # the utterance was cancelled while this job ran
        if isinstance(event, JobAudio):
            return self._audio(utt, event.samples)
        if isinstance(event, JobWords):
            return self._kept(utt, self._words(utt, event.spoken))
        done = utt.job_part
        utt.job = None
        if isinstance(event, JobFailed):
            del self.utterances[utt.id]
            effects: list[Effect] = [*self._release(utt), self._error(ErrorCode(event.code), event.message, utt.id)]
            effects.append(Send(self._end(utt, "error")))
            return effects + self._pump()
        assert isinstance(event, JobDone)
        utt.compute_s += event.compute_s
        effects = []
        if done is not None:
            utt.prev_unit = done.unit
            if utt.clock is not None and done.timing is not None and utt.track is not None:
                effects = self._kept(utt, self._send_words(utt, utt.clock.finish(done.timing, utt.track.position)))
        return effects + self._pump()

    def close(self) -> list[Effect]:
        """The connection went away: give back every job."""
        self.closed = True
        effects: list[Effect] = [Drop(u.job) for u in self.utterances.values() if u.job]
        self.utterances.clear()
        return effects

    # ------------------------------------------------------------ messages

    def _handle(self, msg: protocol.ClientMessage) -> list[Effect]:
        if isinstance(msg, protocol.Hello):
            return self._hello(msg)
        if isinstance(msg, protocol.Speak):
            effects = self._cancel_all() if msg.interrupt else []
            utt = self._new_utterance(
                msg.id, msg.text, *self._defaults(msg.voice, msg.lang, msg.speed), msg.words, msg.generator
            )
            self._whole(utt, msg.text)
            return effects + self._pump()
        if isinstance(msg, protocol.Append):
            utt = self.utterances.get(msg.id)
            if utt is None:
                utt = self._new_utterance(
                    msg.id, msg.text, *self._defaults(msg.voice, msg.lang, msg.speed), msg.words, msg.generator
                )
                utt.buffer = UnitBuffer(first_max_chars=self._first_unit_chars(utt, msg.text))
                utt.markup = markup.MarkupStream()
                self.utterances[utt.id] = utt
            elif utt.buffer is None:
                raise ProtocolError(ErrorCode.BAD_MESSAGE, f"utterance {msg.id!r} takes no more text", msg.id)
            else:
                self._check_length(utt.chars + len(msg.text), msg.id)
                utt.chars += len(msg.text)  # counted once accepted: a refused append leaves no trace
            assert utt.markup is not None
            if utt.clock is None:
                rendered = utt.markup.feed(msg.text)
            else:
                rendered, origins = utt.markup.feed_mapped(msg.text)
                utt.clock.add(msg.text, rendered, origins)
            utt.units.extend(utt.buffer.feed(rendered))
            return self._pump()
        if isinstance(msg, protocol.Flush):
            utt = self._live(msg.id)
            if utt.buffer is not None:
                assert utt.markup is not None
                if utt.clock is None:
                    rendered = utt.markup.flush()
                else:
                    rendered, origins = utt.markup.flush_mapped()
                    utt.clock.add("", rendered, origins)
                utt.buffer.feed(rendered)
                utt.units.extend(utt.buffer.flush())
                utt.buffer = None
                self._lengths.ended(utt.chars)
            return self._pump()
        if isinstance(msg, protocol.Cancel):
            if msg.id is None:
                return self._cancel_all() + self._pump()
            return self._cancel(self._live(msg.id)) + self._pump()
        if isinstance(msg, protocol.Subscribe):
            return [Join(msg.channel, msg.after, (msg.ahead_ms or 0) / 1000)]
        if isinstance(msg, protocol.Unsubscribe):
            return [Leave(msg.channel)]
        if isinstance(msg, protocol.Publish):
            return [Post(self._draft(msg))]
        assert isinstance(msg, protocol.Ping)
        return [Send(protocol.Pong(msg.t, server_time=self._wall()))]

    def _whole(self, utt: Utterance, raw: str) -> None:
        """Queue a whole text as the utterance's units; refuse what cannot be spoken before any audio."""
        if utt.clock is None:
            text = markup.render(raw)
        else:
            text, origins = markup.render_mapped(raw)
            utt.clock.add(raw, text, origins)
        utt.units.extend(split_units(text, first_max_chars=self._first_unit_chars(utt, text)))
        if not any(says_something(u.text) for u in utt.units):
            raise ProtocolError(ErrorCode.BAD_MESSAGE, "text has nothing to speak", utt.id)
        for seg in segment(text, utt.lang, utt.voice.langs[0]):
            self._voice_for(utt, seg.lang)  # refuse a language no voice speaks before any audio
        self.utterances[utt.id] = utt

    # ------------------------------------------------------------ channels

    def _draft(self, msg: protocol.Publish) -> Draft:
        """A publish request, checked here so that every subscriber can speak it."""
        publish_token = self._config.publish_token
        if publish_token is None or not tokens.token_ok(msg.token, publish_token):
            raise ProtocolError(
                ErrorCode.FORBIDDEN,
                "publishing needs the server's publish token (--publish-token): publish.token, "
                "or Authorization: Bearer over HTTP",
            )
        self._check_length(len(msg.text), None)
        text = markup.render(msg.text)
        if not says_something(text):
            raise ProtocolError(ErrorCode.BAD_MESSAGE, "text has nothing to speak")
        voice = self._voice(msg.voice or self._catalog.default_voice, None)
        lang = self._spoken_lang(msg.lang, None) if msg.lang is not None else None
        for seg in segment(text, lang, voice.langs[0]):
            self._speaker(voice, seg.lang, None)  # refused here rather than on every subscriber
        not_before = float(msg.not_before) if msg.not_before is not None else None  # finite: protocol.check
        wanted_at = float(msg.play_at) if msg.play_at is not None else None
        return Draft(
            msg.channel, msg.text, voice.id, lang, float(msg.speed or 1.0), msg.priority, not_before, wanted_at,
            msg.generator,
        )

    def announce(self, ann: Announcement) -> list[Effect]:
        """An announcement of a channel this connection subscribed to, spoken like ``speak``
        (``interrupt: true`` when it is high priority) with the publisher's voice, language
        and speed, so every subscriber makes the same jobs and shares their synthesis."""
        effects = self._cancel_all() if ann.high else []
        try:
            # The publisher's generator, or the server's: never this connection's own (hello),
            # so that every subscriber makes the same jobs.
            utt = self._new_utterance(ann.id, ann.text, ann.voice, ann.lang, ann.speed, self.words)
            utt.generator = ann.generator
            utt.announcement = ann
            self._whole(utt, ann.text)
        except ProtocolError as exc:
            end = protocol.End(ann.id, "error", {}, channel=ann.channel, text=ann.text)
            return effects + [self._error(exc.code, exc.message, ann.id), Send(end)]
        return effects + self._pump()

    def _hello(self, msg: protocol.Hello) -> list[Effect]:
        if not self.authorized:
            if not tokens.token_ok(msg.token, self._config.token or ""):
                raise ProtocolError(ErrorCode.UNAUTHORIZED, "missing or wrong token")
            self.authorized = True
        if msg.voice is not None:
            self.voice = self._voice(msg.voice, None).id
        rate = msg.sample_rate or self.out.sample_rate
        frame_ms = msg.frame_ms or self.out.frame_ms
        fmt = msg.format or self.out.format
        self._frame_samples(rate, frame_ms)
        if fmt == "opus":
            try:
                codecs.check_opus(rate, frame_ms, protocol.SAMPLE_RATES)
            except ValueError as exc:
                raise ProtocolError(ErrorCode.BAD_MESSAGE, str(exc)) from None
        self.out = Output(rate, fmt, frame_ms)
        self.lang = self._spoken_lang(msg.lang, None) if msg.lang is not None else self.lang
        self.speed = msg.speed if msg.speed is not None else self.speed
        self.words = word_unit(msg.words, self.words)
        self.generator = msg.generator if msg.generator is not None else self.generator
        return [Send(self._ready())]

    def _ready(self) -> protocol.Ready:
        return protocol.Ready(
            session=self.id,
            sample_rate=self.out.sample_rate,
            format=self.out.format,
            frame_ms=self.out.frame_ms,
            voices=[v.as_dict() for v in self._catalog.voices.values()],
            default_voice=self.voice,
            loaded=self._catalog.loaded_voices(),
            limits=self._config.limits,
            formats=[f for f in protocol.FORMATS if f != "opus" or codecs.available("opus")],
            clock={"source": self._config.shared_clock, "max_lead_ms": round(self._config.sync_max_lead * 1000)},
            capacity=self._catalog.capacity(),
        )

    # ------------------------------------------------------------ utterances

    def _defaults(self, voice: str | None, lang: str | None, speed: float | None) -> tuple[str, str | None, float]:
        """A request's voice, language and speed, or this connection's (``hello``); "" names no voice."""
        return (
            voice if voice is not None else self.voice,
            lang if lang is not None else self.lang,
            speed if speed is not None else self.speed,
        )

    def _new_utterance(
        self, utt_id: str, text: str, voice: str, lang: str | None, speed: float, words: bool | str | None = None,
        generator: str | None = None,
    ) -> Utterance:
        if utt_id in self.utterances:
            raise ProtocolError(ErrorCode.DUPLICATE_ID, f"utterance {utt_id!r} is still live", utt_id)
        self._check_length(len(text), utt_id)
        if len(self.utterances) >= self._config.max_utterances:
            raise ProtocolError(
                ErrorCode.BUSY, f"at most {self._config.max_utterances} utterances may be live", utt_id
            )
        info = self._voice(voice, utt_id)
        return Utterance(
            id=utt_id,
            voice=info,
            lang=self._spoken_lang(lang, utt_id) if lang is not None else implied_lang(info),
            speed=speed,
            out=self.out,
            created=self._clock(),
            chars=len(text),
            pause_left_ms=round(self._config.max_pause * 1000),
            clock=None if (unit := word_unit(words, self.words)) == "none" else word_timing.Clock(unit),
            generator=generator if generator is not None else self.generator,
        )

    def _pump(self) -> list[Effect]:
        """Start the next part of the head utterance, finishing utterances on the way."""
        effects: list[Effect] = []
        while self.utterances:
            utt = next(iter(self.utterances.values()))
            if utt.job is not None:
                break
            if utt.parts:
                effects.extend(self._submit(utt))
                if utt.id in self.utterances:
                    break
                continue  # refused by admission control: the next utterance may go
            if utt.units:
                try:
                    self._expand(utt, utt.units.popleft())
                except ProtocolError as exc:  # a language no voice speaks, met mid-stream
                    del self.utterances[utt.id]
                    effects.append(self._error(exc.code, exc.message, utt.id))
                    effects.append(Send(self._end(utt, "error")))
                continue
            if utt.buffer is not None:
                break  # waiting for more text (append) or a flush
            effects.extend(self._finish(utt))
        return effects

    def _expand(self, utt: Utterance, unit: Unit) -> None:
        """Cut a unit at its breaks and into language segments, each with the voice that speaks it."""
        first = True
        for piece in markup.pieces(unit.text):
            if isinstance(piece, int):
                ms = min(piece, utt.pause_left_ms)
                utt.pause_left_ms -= ms
                # Pause jobs of at most PAUSE_JOB_MS: the next is held back while the client is behind.
                while ms > 0:
                    utt.parts.append(min(ms, PAUSE_JOB_MS))
                    ms -= PAUSE_JOB_MS
                continue
            for seg in segment(piece, utt.lang, utt.voice.langs[0]):
                if not seg.text.strip():
                    continue
                voice = self._voice_for(utt, seg.lang)
                text = seg.text.strip()
                if utt.clock is None:
                    utt.parts.append(Part(seg.lang, text, self._lexicon.apply(text), voice, unit, first))
                else:
                    speak, origins = self._lexicon.apply_mapped(text)
                    timing = utt.clock.part(text, origins)
                    utt.parts.append(Part(seg.lang, text, speak, voice, unit, first, timing))
                first = False
        if first:  # only breaks: the unit's pause still separates it from the next
            utt.prev_unit = unit

    def _first_unit_chars(self, utt: Utterance, text: str) -> int:
        """The first unit's length for the voice that will speak the start of ``text``.

        Not the utterance's own voice: Chinese sent with no voice named goes from the
        default (English) voice to the Mandarin one, and the first unit decides the time
        to first audio of the voice that actually speaks it.
        """
        head = self._head(utt, text[:200])
        if head is None:
            return self._catalog.first_unit_chars(utt.voice.engine, utt.lang)
        seg, voice = head
        return self._catalog.first_unit_chars(voice.engine, seg.lang)

    def _head(self, utt: Utterance, text: str) -> tuple[Segment, VoiceInfo] | None:
        """The first language segment of ``text`` that says something, and the voice that
        will speak it (the utterance's own where none speaks its language: that is refused
        later, with its code); None where nothing in ``text`` makes a sound."""
        seg = next((x for x in segment(text, utt.lang, utt.voice.langs[0]) if says_something(x.text)), None)
        if seg is None:
            return None
        voice = utt.voice
        with contextlib.suppress(ProtocolError):
            voice = self._speaker(utt.voice, seg.lang, utt.id)
        return seg, voice

    def _voice_for(self, utt: Utterance, lang: str) -> VoiceInfo:
        return self._speaker(utt.voice, lang, utt.id)

    def _speaker(self, chosen: VoiceInfo, lang: str, utt_id: str | None) -> VoiceInfo:
        """``chosen`` if it speaks ``lang``, else that language's default voice."""
        if lang in chosen.langs:
            return chosen
        voice = self.lang_voices().get(lang)
        if voice is None:
            raise self.not_offered(lang, utt_id)
        return voice

    def _spoken_lang(self, lang: str, utt_id: str | None) -> str:
        """A request's ``lang`` as one of SPOKEN_LANGS, or ``unsupported_language``."""
        spoken = spoken_lang(lang)
        if spoken is None:
            raise self.not_offered(lang.lower(), utt_id)
        return spoken

    def not_offered(self, lang: str, utt_id: str | None = None) -> ProtocolError:
        """``unsupported_language`` for ``lang``, worded one way whether a request named it
        (``lang: "ko"``) or its text holds it (Hangul), the languages offered in one order."""
        offered = self.lang_voices()
        return ProtocolError(
            ErrorCode.UNSUPPORTED_LANGUAGE,
            f"{lang[:20]!r} is not offered here; text is read in {', '.join(x for x in SPOKEN_LANGS if x in offered)}",
            utt_id,
        )

    def lang_voices(self) -> dict[str, VoiceInfo]:
        """Default voice per language: configured (``--lang-voices``), else the first voice made for it."""
        return {lang: v for lang, v in self._catalog.lang_voices.items() if lang in SPOKEN_LANGS}

    def _submit(self, utt: Utterance) -> list[Effect]:
        effects: list[Effect] = []
        now = self._clock()
        head = utt.parts[0]
        deadline = self._play_until if self._play_until else now
        if isinstance(head, int):  # a pause, at the rate of the voice before it (no resampler switch)
            part = None
            voice = utt.job_part.voice if utt.job_part is not None else utt.voice
            job = Job(utt.id, "", voice, voice.langs[0], utt.speed, deadline, opens=not utt.started, pause_ms=head)
        else:
            part, voice = head, head.voice
            job = Job(
                utt.id, part.speak, voice, part.lang, utt.speed, deadline, opens=not utt.started,
                words=utt.clock is not None, generator=utt.generator,
            )  # fmt: skip
            if utt.announcement is not None:
                job.shared = (utt.announcement.id, utt.shared_jobs)
                utt.shared_jobs += 1
        to_come = self._lengths.still_to_come(utt.chars) if utt.buffer is not None else 0
        job.rest_chars, job.rest_cjk, job.voices = _what_follows(utt, job.voice, to_come)
        after = self._next_part(utt, part) if part is not None else None
        if after is not None and after[0].id != voice.id:  # a change of voice: the thread plans for it
            job.next_first_s = self._catalog.next_run_s(after[0], after[1], after[2], utt.generator)
        if not utt.started:
            # A stream that would wait for room is told when it gets some, by what the
            # streams ahead of it still have to say.
            holds = self._config.admission == "queue" and utt.announcement is None
            bound = self._bound.now()
            wait, load, first_audio = self._catalog.estimate(job, bound if holds else None)
            late = wait > self._config.admission_max_wait or load > bound
            # An announcement is never refused: its synthesis is shared, and it was queued on its channel.
            if late and self._config.admission != "queue" and utt.announcement is None:
                return self._refuse(utt, wait, load)
            # No room on the thread: this stream waits for one to end rather than start at
            # the cost of every stream there (issue 32). One that fits may still wait a
            # moment, for the streams there to hold the audio a crowd with it needs
            # (``room.crowd_hold_s``). An announcement is never held: its kiosks play it at
            # one time.
            queued = holds and load > bound
            if holds:
                job.room = bound
            utt.started = True
            utt.first_job = now
            if part is not None and self._outruns(utt, part, after):
                utt.held, utt.held_job = [], job
            utt.track = Track(utt.out.sample_rate, utt.out.frame_ms, utt.out.format)
            start = self._start(utt, voice.id, round(wait * 1000), round(first_audio * 1000), queued=queued or None)
            effects.append(Send(start))
        utt.parts.popleft()
        job.last = not utt.parts and not utt.units and utt.buffer is None
        utt.job = job
        utt.job_since = now
        utt.job_part = part
        utt.part_started = False
        # What the client holds grows by whole frames (``Job.framed``), the part frame left
        # of the job before going out with its first. The pause this part opens with goes
        # out then too, and is not counted: the thread's runs were measured gapless without
        # it, and counted, the least audio a listener held fell by 50-110 ms in three of four
        # cells (docs/benchmarks.md, "Whole frames").
        job.frame_s = utt.out.frame_ms / 1000
        job.unsent_s = utt.track.unsent_s if utt.track is not None else 0.0
        job.lag_s = RESAMPLER_HOLD_S if utt.out.sample_rate != job.voice.native_rate else 0.0
        effects.append(Submit(utt.job))
        return effects

    def _outruns(self, utt: Utterance, head: Part, after: tuple[VoiceInfo, str, str, float] | None) -> bool:
        """Whether the voice after an utterance's opening part would have its first audio
        only after that part's audio ran out: Mandarin by Kokoro after a short English
        greeting by Hibari, which makes its audio at once (issue 32: "Hello，欢迎来到杭州！"
        underran at the change of voice). Such an opening part's audio is kept back and
        goes out with the next voice's first (``_kept``): the listener waits before the
        first word rather than in the middle of the sentence. An announcement plays at its
        time, with a lead that covers this. ``after``: who speaks next (``_next_part``)."""
        if utt.announcement is not None or after is None:
            return False
        voice, lang, text, pause_s = after
        if voice.id == head.voice.id:
            return False
        compute, _ = self._catalog.first_audio_s(voice, lang, text)
        _, audio_s = self._catalog.first_audio_s(head.voice, head.lang, head.speak)
        return compute + HANDOVER_GUARD_S > audio_s / utt.speed + pause_s

    def _next_part(self, utt: Utterance, head: Part) -> tuple[VoiceInfo, str, str, float] | None:
        """Who speaks after an utterance's part ``head`` (its opening, or the part being
        submitted), in which language, what, and the pause between: the next part of its
        unit, or the next unit's first ("Hi. 欢迎光临。" is two units, the pause of a sentence
        end between them). None where a <break> or nothing follows."""
        if len(utt.parts) > 1:
            after = utt.parts[1]
            return (after.voice, after.lang, after.speak, 0.0) if isinstance(after, Part) else None
        if not utt.units or markup.BREAK_OPEN in utt.units[0].text:
            return None
        found = self._head(utt, utt.units[0].text)
        if found is None:
            return None
        seg, voice = found
        return voice, seg.lang, self._lexicon.apply(seg.text.strip()), pause_ms(head.unit) / 1000

    def _kept(self, utt: Utterance, effects: list[Effect]) -> list[Effect]:
        """``effects`` of an utterance whose opening part is kept back join it (``_outruns``)."""
        if utt.held is None:
            return effects
        utt.held.extend(effects)
        return []

    def _release(self, utt: Utterance) -> list[Effect]:
        """What was kept back of an utterance, to go out now: from here the client holds it."""
        held, utt.held, utt.held_job = utt.held or [], None, None
        if held and utt.held_s:
            now = self._clock()
            if utt.first_audio is None:
                utt.first_audio = now
            self._play_until = max(self._play_until, now) + utt.held_s
        utt.held_s = 0.0
        return held

    def _refuse(self, utt: Utterance, wait: float, load: float) -> list[Effect]:
        """Admission control said no: the utterance is dropped before it started."""
        del self.utterances[utt.id]
        why = f"expected wait {wait:.1f} s" if wait > self._config.admission_max_wait else f"load {load:.2f}"
        message = f"the server is busy ({why}); try again later"
        effects: list[Effect] = [self._error(ErrorCode.BUSY, message, utt.id)]
        if self._config.admission == "close":
            effects.append(Close(protocol.CloseCode.OVERLOADED, "overloaded"))
        return effects

    def _audio(self, utt: Utterance, samples: np.ndarray) -> list[Effect]:
        part, track = utt.job_part, utt.track
        if utt.job is None or track is None:
            return []  # unreachable: audio comes only for the running job of a started utterance
        voice = utt.job.voice
        # The next voice's first audio: what was kept back of the opening part goes first.
        effects: list[Effect] = self._release(utt) if utt.held_job is not None and utt.held_job is not utt.job else []
        samples, bad = audio.sanitize(samples)
        if bad:
            log.warning("session %s: %d non-finite samples from %s", self.id, bad, voice.id)
        pause = self._pause_before(utt)
        if utt.audio_s + pause / 1000 + len(samples) / voice.native_rate > self._config.max_audio:
            utt.held = None  # what was kept back is dropped with the rest
            return self._too_long(utt)
        if not utt.part_started:
            utt.part_started = True
            effects.extend(self._frames(utt, track.switch_rate(voice.native_rate)))
            if pause:
                effects.extend(self._frames(utt, track.push(audio.silence(pause, track.rate))))
            if part is not None:
                kind = "sentence" if part.first else "segment"
                channel = utt.announcement.channel if utt.announcement is not None else None
                mark = protocol.Mark(
                    utt.id, part.text, track.position, kind, voice=voice.id, lang=part.lang, channel=channel
                )
                effects.append(Send(mark))
        effects.extend(self._frames(utt, track.push(samples)))
        return self._kept(utt, effects)

    def _pause_before(self, utt: Utterance) -> int:
        """Milliseconds of silence the running part's first audio will come after."""
        part = utt.job_part
        if not utt.part_started and part is not None and part.first and utt.prev_unit is not None:
            # The pause goes before a unit rather than after, so none trails the last one.
            return pause_ms(utt.prev_unit)
        return 0

    def _words(self, utt: Utterance, spoken: tuple[Spoken, ...]) -> list[Effect]:
        """An engine's timed items of the running part, as a ``words`` message."""
        part, track, clock = utt.job_part, utt.track, utt.clock
        if part is None or part.timing is None or track is None or clock is None or utt.job is None:
            return []  # no words asked for (a shared announcement's run has them anyway)
        rate = utt.out.sample_rate
        at = track.position + self._pause_before(utt) * rate // 1000
        return self._send_words(utt, clock.entries(part.timing, spoken, at, rate / utt.job.voice.native_rate))

    def _send_words(self, utt: Utterance, entries: list[word_timing.Entry]) -> list[Effect]:
        if not entries:
            return []
        channel = utt.announcement.channel if utt.announcement is not None else None
        return [Send(protocol.Words(utt.id, [e.as_dict() for e in entries], channel=channel))]

    def _too_long(self, utt: Utterance) -> list[Effect]:
        """The utterance would pass limits.max_audio_ms: it ends here, with an error."""
        del self.utterances[utt.id]
        effects: list[Effect] = []
        if utt.job is not None:
            utt.job.cancelled = True
            effects.append(Drop(utt.job))
            utt.job = None
        message = f"this text would make more than {self._config.max_audio:g} s of audio; send it in parts"
        effects.append(self._error(ErrorCode.AUDIO_TOO_LONG, message, utt.id))
        effects.append(Send(self._end(utt, "error")))
        return effects + self._pump()

    def _frames(self, utt: Utterance, frames: list[Frame]) -> list[Effect]:
        effects: list[Effect] = []
        now = self._clock()
        for frame in frames:
            effects.append(Send(protocol.Audio(utt.id, frame.seq, frame.pts, frame.data)))
            if utt.held is not None:  # kept back (_outruns): the client holds none of it yet
                utt.held_s += frame.seconds
                continue
            if utt.first_audio is None:
                utt.first_audio = now
            else:
                self._count_late(utt, now)
            self._play_until = max(self._play_until, now) + frame.seconds
        return effects

    def _count_late(self, utt: Utterance, now: float) -> None:
        """Count a frame that a client playing from its first frame waited for
        (``end.stats.underruns``, ``late_ms``; ``rtts_underruns``): its audio ran out
        before this one was sent, and this job had its text by then. A stream fed by
        ``append`` that ran out while no text was there is the feeder's wait, not the
        server's; an announcement plays at its ``play_at``, not from its first frame. The
        admission bound hears of it (``AdmissionBound.underran``)."""
        dry = now - self._play_until
        if dry > LATE_TOLERANCE_S and utt.job_since < self._play_until and utt.announcement is None:
            utt.underruns += 1
            utt.late_s += dry
            if utt.job is not None:
                self._bound.underran(*self._catalog.thread_load(utt.job))

    def _finish(self, utt: Utterance) -> list[Effect]:
        """All text spoken: send the tail (the one short frame) and ``end``."""
        del self.utterances[utt.id]
        effects: list[Effect] = self._release(utt)
        if utt.track is not None:
            effects.extend(self._frames(utt, utt.track.finish()))
        else:
            effects.append(Send(self._start(utt, utt.voice.id)))
        effects.append(Send(self._end(utt, "done")))
        return effects

    def _cancel(self, utt: Utterance) -> list[Effect]:
        del self.utterances[utt.id]
        effects: list[Effect] = []
        if utt.job is not None:
            utt.job.cancelled = True
            effects.append(Drop(utt.job))
        effects.append(Send(self._end(utt, "cancelled")))
        return effects

    def _cancel_all(self) -> list[Effect]:
        effects: list[Effect] = []
        for utt in list(self.utterances.values()):
            effects.extend(self._cancel(utt))
        return effects

    def _start(
        self, utt: Utterance, voice: str, expected_wait_ms: int | None = None,
        expected_audio_ms: int | None = None, queued: bool | None = None,
    ) -> protocol.Start:
        ann = utt.announcement
        out = utt.out
        if ann is None:
            return protocol.Start(utt.id, voice, out.sample_rate, out.format, expected_wait_ms, expected_audio_ms,
                                  queued=queued)
        return protocol.Start(
            utt.id, voice, out.sample_rate, out.format, expected_wait_ms,
            channel=ann.channel, text=ann.text, priority=ann.priority, play_at=ann.play_at,
        )

    def _end(self, utt: Utterance, reason: str) -> protocol.End:
        ann = utt.announcement
        if ann is None:
            return protocol.End(utt.id, reason, self._stats(utt))
        return protocol.End(utt.id, reason, self._stats(utt), channel=ann.channel, text=ann.text)

    def _stats(self, utt: Utterance) -> dict[str, float]:
        audio_s = utt.audio_s

        def ms(t: float | None) -> float:
            return round((t - utt.created) * 1000, 1) if t is not None else -1.0

        return {
            "queue_ms": ms(utt.first_job),
            "ttfa_ms": ms(utt.first_audio),
            "audio_ms": round(audio_s * 1000, 1),
            "rtf": round(utt.compute_s / audio_s, 3) if audio_s else 0.0,
            "underruns": utt.underruns,
            "late_ms": round(utt.late_s * 1000, 1),
        }

    # ------------------------------------------------------------ helpers

    def _live(self, utt_id: str) -> Utterance:
        utt = self.utterances.get(utt_id)
        if utt is None:
            raise ProtocolError(ErrorCode.UNKNOWN_ID, f"no live utterance {utt_id!r}", utt_id)
        return utt

    def _voice(self, voice_id: str, utt_id: str | None) -> VoiceInfo:
        info = self._catalog.voices.get(voice_id)
        if info is None:
            raise ProtocolError(ErrorCode.UNKNOWN_VOICE, f"no voice {voice_id[:80]!r}; see {self.voices_at}", utt_id)
        return info

    def _check_length(self, chars: int, utt_id: str | None) -> None:
        if chars > self._config.max_text_chars:
            raise ProtocolError(
                ErrorCode.TEXT_TOO_LONG, f"text is over {self._config.max_text_chars} characters", utt_id
            )

    @staticmethod
    def _frame_samples(rate: int, frame_ms: int) -> int:
        try:
            return audio.frame_samples(rate, frame_ms)
        except ValueError as exc:
            raise ProtocolError(ErrorCode.BAD_MESSAGE, str(exc)) from None

    def _error(self, code: ErrorCode, message: str, utt_id: str | None = None) -> Send:
        return Send(protocol.Error(code.value, message, utt_id))
