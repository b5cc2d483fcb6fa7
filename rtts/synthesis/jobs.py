"""A unit of inference work and the events it reports back.

A ``Job`` is one text unit (a clause or a sentence) of one utterance. The session
creates it, the inference thread runs it, and its events travel back to the event
loop through ``sink``. Pure data: shared by the session (no threads) and the worker.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from rtts.engines.base import Spoken, VoiceInfo

_ids = itertools.count(1)


class Estimate(NamedTuple):
    """What the inference thread expects of a job submitted now (``InferenceWorker.estimate``)."""

    wait_s: float  # seconds until the thread starts on it
    load: float  # the load of the thread with its stream (the streams' RTFs summed)
    audio_s: float  # seconds until its first audio is made


@dataclass(frozen=True)
class JobAudio:
    samples: np.ndarray  # float32 mono at the engine's native rate


@dataclass(frozen=True)
class JobWords:
    """The words of the audio that follows (``Timing``), in the engine's samples from the
    next ``JobAudio`` on and spans of the job's ``text``."""

    spoken: tuple[Spoken, ...]


@dataclass(frozen=True)
class JobDone:
    compute_s: float  # seconds the inference thread spent on this job


@dataclass(frozen=True)
class JobFailed:
    code: str  # protocol error code
    message: str


JobEvent = JobAudio | JobWords | JobDone | JobFailed


@dataclass(eq=False)
class Job:
    utterance: str
    text: str
    voice: VoiceInfo
    lang: str
    speed: float
    # Monotonic time at which the client is expected to run out of audio: the worker
    # runs the job with the earliest deadline first, so a stream about to starve goes
    # ahead of one with audio in hand.
    deadline: float
    # The utterance's first job: its first audio is awaited now (a client may stop
    # what it plays for it, and time to first audio is what a listener notices),
    # however much audio of an earlier utterance the client still holds.
    opens: bool = False
    sink: Callable[[Job, JobEvent], None] | None = None
    # A pause (<break>): this many ms of silence instead of synthesis (``text`` is empty).
    # It travels as a job so it is held back and framed like speech, never built at once.
    pause_ms: int = 0
    # A channel announcement's job: (announcement id, its place in the announcement). Every
    # subscriber's session makes the same jobs; ``channels.SharedJobs`` runs each once.
    shared: tuple[str, int] | None = None
    # The client asked for word timing: the engine also reports ``JobWords``.
    words: bool = False
    # The waveform generator the client asked for (protocol.GENERATORS), for a voice that
    # has a choice of them (``VoiceInfo.generators``); None: the server's.
    generator: str | None = None
    # A stream's first job that waits for room (issue 32, ``--admission queue``): it goes to
    # the thread only once the load of the streams there, with its own, is at most this
    # (or it would be alone). None: it goes at once.
    room: float | None = None
    # Nothing of its utterance follows (its text is complete and this is its last part):
    # once it ends, its stream is off the thread at once, not STREAM_GAP_S later.
    last: bool = False
    # Characters of its utterance after it, as far as they are known when it is made (text
    # still to come by append is not): what its stream still has to say, by which a stream
    # waiting for room is told when it gets some (``room.wait_for_room``).
    rest_chars: int = 0
    # Of those, the Chinese and Japanese characters: read by its Chinese or Japanese voice,
    # at several times a Latin letter's seconds.
    rest_cjk: int = 0
    # The other voices its utterance speaks with, as far as the session knows them (the
    # parts of a mixed-language unit, and those before): the stream's load on the thread is
    # its costliest voice's, not the voice of the part that happens to come first.
    voices: tuple[VoiceInfo, ...] = ()
    # Compute seconds of the first run of its utterance's next part where another voice
    # says it (a mixed utterance's change of voice: Mandarin by Kokoro after English by
    # Hibari; ``InferenceWorker.next_run_s``). It is due when this job's audio runs out,
    # and this job's own turn says nothing of it: the thread counts it when it paces the
    # runs of the streams beside this one (``InferenceWorker._run_budget``).
    next_first_s: float = 0.0
    # The client gets its audio in whole frames of ``frame_s`` seconds (its ``hello.frame_ms``),
    # and ``unsent_s`` of its utterance's audio waits in the session for a frame to fill. So a
    # chunk adds to what the client holds the frames it completes, not its own length: an HTTP
    # route's 200 ms frames keep up to 0.2 s back, which a run paced to end 0.2 s before the
    # audio ran out would find gone (``framed``). 0: every sample goes out as it is made.
    frame_s: float = 0.0
    unsent_s: float = 0.0
    # Where the client asked for another rate than the voice's, the most the resampler may
    # hold back besides (``track.RESAMPLER_HOLD_S``): a frame fills that much later.
    lag_s: float = 0.0
    # Written by the event loop, read by the inference thread between chunks; a plain
    # bool is enough because it only ever goes False → True.
    cancelled: bool = False
    seq: int = field(default_factory=lambda: next(_ids))

    def framed(self, seconds: float) -> float:
        """Of ``seconds`` more audio made, how much the client gets now: whole frames only,
        what is short of one waits for the next chunk (``Track``'s framer), and ``lag_s`` is
        taken as held in the resampler: never more than the session sends."""
        if self.frame_s <= 0.0:
            return seconds
        made = self.unsent_s + seconds
        sent = max(0, math.floor((made - self.lag_s) / self.frame_s + 1e-6)) * self.frame_s
        self.unsent_s = made - sent
        return sent
