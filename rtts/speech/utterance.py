"""One utterance's state as the session keeps it: its output format, the parts of its
current unit and what it has produced so far; and two questions about what a client asked
(which word unit, whether a unit says anything)."""

from __future__ import annotations

import unicodedata
from collections import deque
from dataclasses import dataclass, field

from rtts.broadcast.announcements import Announcement
from rtts.engines.base import VoiceInfo
from rtts.sound.track import Track
from rtts.speech import word_timing
from rtts.speech.effects import Effect
from rtts.synthesis.jobs import Job
from rtts.text import markup
from rtts.text.split import Unit, UnitBuffer

__all__ = ["Output", "Part", "Utterance", "says_something", "word_unit"]


def word_unit(asked: bool | str | None, default: str) -> str:
    """``words`` as one of protocol.WORD_UNITS ("word", "char", "none")."""
    if asked is None:
        return default
    if isinstance(asked, bool):
        return "word" if asked else "none"
    return asked


def says_something(text: str) -> bool:
    """Whether a unit has anything to read or a pause: a letter, a digit or a <break>.
    Punctuation, zero-width and direction marks alone make no sound."""
    return markup.BREAK_OPEN in text or any(unicodedata.category(ch)[0] in "LN" for ch in text)


@dataclass(frozen=True)
class Output:
    """The audio format of one utterance, fixed when it is created."""

    sample_rate: int
    format: str
    frame_ms: int


@dataclass(frozen=True)
class Part:
    """One language segment of a unit: one job, spoken by one voice."""

    lang: str
    text: str  # as the client wrote it (for marks)
    speak: str  # after the lexicon (for the engine)
    voice: VoiceInfo
    unit: Unit
    first: bool  # the unit's first part: the pause between units goes before it
    timing: word_timing.Part | None = None  # where its text came from, when words are asked for


@dataclass(eq=False)
class Utterance:
    id: str
    voice: VoiceInfo
    lang: str | None  # the request's language hint; None: guessed from the script
    speed: float
    out: Output
    created: float
    generator: str | None = None  # the request's (protocol.GENERATORS); None: the server's
    units: deque[Unit] = field(default_factory=deque)
    parts: deque[Part | int] = field(default_factory=deque)  # the current unit's parts and pauses (ms)
    buffer: UnitBuffer | None = None  # text still arriving by append; None once complete
    markup: markup.MarkupStream | None = None
    chars: int = 0
    job: Job | None = None
    job_part: Part | None = None  # None while a pause job runs
    prev_unit: Unit | None = None
    part_started: bool = False
    pause_left_ms: int = 0  # <break> time this utterance may still hold (limits.max_pause_ms)
    started: bool = False  # `start` sent
    first_audio: float | None = None
    first_job: float | None = None
    job_since: float = 0.0  # when ``job`` went to the thread: its text was the server's from then
    underruns: int = 0  # frames its client waited for, and their wait (Session._count_late)
    late_s: float = 0.0
    compute_s: float = 0.0
    track: Track | None = None  # from the first job on: resampling, frames, positions
    # A channel's announcement: its synthesis is shared with every subscriber of this
    # instance (Job.shared), so its jobs are numbered.
    announcement: Announcement | None = None
    shared_jobs: int = 0
    clock: word_timing.Clock | None = None  # word timing, when asked for (``words``)
    # An opening part whose audio would run out before the next voice has its first
    # (``Session._outruns``): what it sends is kept here, with its length in seconds, and
    # goes out with the first audio of a job other than ``held_job``.
    held: list[Effect] | None = None
    held_s: float = 0.0
    held_job: Job | None = None

    @property
    def audio_s(self) -> float:
        """Audio produced so far, pauses included."""
        return self.track.audio_s if self.track is not None else 0.0
