"""The seam between rtts and its synthesis engines.

Two things make an engine:

* an ``Engine``: one ONNX model (which may speak several voices), loaded, run and
  unloaded. All of its methods except the cheap properties are called from the single
  inference thread only, so an engine needs no locking of its own.
* an ``EngineKind``: what rtts knows about the engine before any model loads: how its
  voices are found (built-in packs and files in the models directory, through a
  ``Scanner``), what it can do (``streams_in_unit``, ``first_unit_chars``,
  ``lang_voices``), what it costs until measured (``Costs``) and an optional warm-up.

Kinds are registered in ``engines/registry.py``, one line each; nothing outside an
engine's own module branches on its name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

# What an engine says it read for each word: made by the front ends' word matching
# (below the engines), named by the seam.
from rtts.g2p.words import Spoken  # noqa: F401

# Raised on both sides of the inference process's pipe, so it is the host's (below the
# engines); the seam names it because engines raise it too.
from rtts.host.errors import EngineError  # noqa: F401 (named by the seam)

if TYPE_CHECKING:
    from rtts.host.client import Host


@dataclass(frozen=True)
class VoiceInfo:
    """What a client sees of a voice (``ready.voices`` and ``/voices``)."""

    id: str  # stable, e.g. "kokoro/jf_alpha" or "piper/en_US-joe-medium"
    name: str  # human readable
    langs: tuple[str, ...]  # ISO 639-1 codes this voice can speak, e.g. ("en",)
    engine: str  # the name of its EngineKind
    native_rate: int  # the model's own sample rate in Hz
    model: str  # key of the Engine that speaks it
    speaker: str = ""  # style vector name (Kokoro) or speaker id (multi-speaker Piper)
    gender: str | None = None  # "female" or "male", when the voice's pack says
    grade: str | None = None  # the pack's own published quality grade (A … F), when it has one
    # Which waveform generator speaks each language, for an engine that has more than one
    # (Kokoro: its own or the distilled student, engines/kokoro_student.py); empty otherwise.
    generators: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "id": self.id,
            "name": self.name,
            "langs": list(self.langs),
            "engine": self.engine,
            "native_rate": self.native_rate,
            "gender": self.gender,
            "grade": self.grade,
        }
        if self.generators:
            out["generator"] = dict(self.generators)
        return out


class Engine(Protocol):
    key: str
    sample_rate: int

    @property
    def loaded(self) -> bool: ...

    def load(self) -> None:
        """Create the ONNX session (idempotent). Raises EngineError on a broken model."""

    def unload(self) -> None:
        """Drop the ONNX session so its memory can be returned to the OS."""

    def synthesize(
        self, text: str, voice: VoiceInfo, lang: str, speed: float, lead_s: float = 0.0, words: bool = False
    ) -> Iterator[np.ndarray | Timing]:
        """Speak one text unit; yield float32 mono chunks in [-1, 1] at ``sample_rate``.

        Loads the model if needed. Text longer than the model's input limit is split
        (never truncated). Yielding in pieces lets the caller stop between them.
        ``lead_s`` is how much audio the listener already holds: an engine that
        streams inside a unit may start with a bigger (cheaper per second) piece
        when it is not needed at once; one that cannot stream ignores it.
        With ``words``, a ``Timing`` also comes before the audio it describes, from
        the same forward pass: the same audio as without.
        """
        ...

    def limit_run_memory(self, mb: float | None) -> None:
        """Keep what one run adds to the inference process's memory under ``mb`` from
        now on (None: no bound), where the engine can (shorter runs); one that cannot
        ignores it (its ``Memory.min_run_mb`` is then its ``run_mb``)."""

    # Optional: ``limit_run_compute(seconds)``, called before each chunk is asked for, is
    # what the next run may take with every client on the thread still holding audio
    # (``engines/run_pacing.py``). An engine that makes a unit in long runs (Kokoro) sizes
    # its runs by it; one without it is not asked. With it, ``run_overhead_s(lang,
    # generator)``: the compute of a run's fixed part, which streams sharing the thread in
    # short runs pay often; admission lets a stream in beside others once they hold audio
    # for it (``synthesis/room.crowd_hold_s``). One without it is taken to have none.
    #
    # Optional: ``memory``, a ``Memory`` the budget plans this engine by in place of its
    # kind's ``costs.memory``, for an engine whose memory depends on how it was made
    # (Kokoro with its distilled generator: a tenth of the run memory).
    #
    # Optional, for an engine with more than one waveform generator (``VoiceInfo.generators``):
    # ``synthesize(..., generator=NAME)``, the one a request named (protocol.GENERATORS;
    # passed only when one was); ``generator_part(lang, NAME)``, (part name, MB) of what
    # speaking ``lang`` with it opens beyond the load, or None; ``run_memory(lang, NAME)``,
    # (most, least) MB one of its runs adds.


@dataclass(frozen=True)
class Timing:
    """What ``synthesize(..., words=True)`` yields before audio: the items it describes, in order."""

    spoken: tuple[Spoken, ...]


@dataclass(frozen=True)
class Memory:
    """What an engine holds in the inference process, in MB of resident memory, until the
    inference thread has measured it on this host (``benchmarks/memory_parts.py``)."""

    model_mb: float = 0.0  # its sessions (and whatever loads with them)
    # A language's own front end, loaded in the inference process by its first unit.
    front_ends_mb: tuple[tuple[str, float], ...] = ()
    run_mb: float = 0.0  # most one run adds at its peak (its longest unit)
    # Least it can hold a run to (``Engine.limit_run_memory``); None: it cannot bound a run.
    min_run_mb: float | None = None
    # An engine that cannot bound a run but whose run grows with its unit (Hibari's model
    # runs a unit whole): a unit of n characters adds at most
    # min(run_mb, unit_base_mb + n * unit_mb_per_char), and is planned at that. 0: every
    # run is planned at run_mb.
    unit_base_mb: float = 0.0
    unit_mb_per_char: float = 0.0

    def unit_run_mb(self, chars: int) -> float:
        """What one run of a unit of ``chars`` characters adds at most (MB)."""
        if self.unit_mb_per_char <= 0:
            return self.run_mb
        return min(self.run_mb, self.unit_base_mb + chars * self.unit_mb_per_char)


@dataclass(frozen=True)
class Costs:
    """An engine's compute, until the inference thread has measured it on this host."""

    rtf: float  # compute seconds per second of audio
    load_s: float  # seconds to load the model
    first_s_per_char: float  # compute seconds per character of a unit before its first chunk
    memory: Memory = Memory()


@dataclass(frozen=True)
class EngineContext:
    """What every engine is made with."""

    cache_dir: Path
    threads: int
    host: Host  # the inference process, where engines open their ONNX sessions
    # Which waveform generator an engine with a distilled one uses (Kokoro: see
    # engines/kokoro_student.py): "auto", "student" or "teacher".
    generator: str = "auto"


# Adds a voice found by a scan; False (and a warning logged) when its id is taken.
AddVoice = Callable[[VoiceInfo, "Path | str"], bool]


class Scanner(Protocol):
    """One discovery pass of one engine kind: reads json files and array headers, never a model."""

    def builtin(self, add: AddVoice) -> None:
        """Offer the voices of the installed packs."""

    def file(self, path: Path, add: AddVoice) -> bool:
        """Offer the voices in ``path`` (a file in the models directory); True when it was this kind's."""
        ...

    def engines(self, context: EngineContext, old: Mapping[str, Engine]) -> dict[str, Engine]:
        """The engines for the voices found, by ``VoiceInfo.model``, reusing ``old`` ones
        (and their loaded models) that did not change. Called on the inference thread."""
        ...


class EngineKind(Protocol):
    name: str  # VoiceInfo.engine of its voices, and the first part of their ids
    costs: Costs
    # Whether it can stop and hand out audio inside one text unit (a running unit then
    # yields the thread after its current piece; one that cannot runs to its end).
    streams_in_unit: bool
    # Longest first unit of an utterance: the first unit alone decides the time to first
    # audio (``--first-unit-chars-NAME`` overrides it).
    first_unit_chars: int
    # Where a language needs another length: (lang, chars), e.g. whole phrases for one whose
    # listeners mishear a cut inside them.
    first_unit_chars_by_lang: tuple[tuple[str, int], ...]
    # Its preferred voice per language, for text another voice cannot speak: ((lang, id), ...).
    lang_voices: tuple[tuple[str, str], ...]
    # Its own requests to the inference process: op name → "module:function" run there.
    host_ops: Mapping[str, str]

    def scanner(self) -> Scanner:
        """A fresh discovery pass."""
        ...

    def warm_up(self, host: Host, langs: tuple[str, ...], cache_dir: Path | None = None) -> None:
        """Prepare what the first request would otherwise wait for (called on the inference
        thread once a server starts preloading): the front ends of ``langs`` (those of
        ``costs.memory.front_ends_mb`` that fit the memory budget), keeping what they
        derive in ``cache_dir``; may do nothing."""
