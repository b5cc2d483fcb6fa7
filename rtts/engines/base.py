"""The small interface every synthesis engine implements.

An engine owns one ONNX model (which may speak several voices). All of its methods
except the cheap properties are called from the single inference thread only, so an
engine needs no locking of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class VoiceInfo:
    """What a client sees of a voice (``ready.voices`` and ``/voices``)."""

    id: str  # stable, e.g. "kokoro/jf_alpha" or "piper/en_US-joe-medium"
    name: str  # human readable
    langs: tuple[str, ...]  # ISO 639-1 codes this voice can speak, e.g. ("en",)
    engine: str  # "kokoro" or "piper"
    native_rate: int  # the model's own sample rate in Hz
    model: str  # key of the Engine that speaks it
    speaker: str = ""  # style vector name (Kokoro) or speaker id (multi-speaker Piper)
    gender: str | None = None  # "female" or "male", when the voice's pack says
    grade: str | None = None  # the pack's own published quality grade (A … F), when it has one

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name,
            "langs": list(self.langs),
            "engine": self.engine,
            "native_rate": self.native_rate,
            "gender": self.gender,
            "grade": self.grade,
        }


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
        self, text: str, voice: VoiceInfo, lang: str, speed: float, lead_s: float = 0.0
    ) -> Iterator[np.ndarray]:
        """Speak one text unit; yield float32 mono chunks in [-1, 1] at ``sample_rate``.

        Loads the model if needed. Text longer than the model's input limit is split
        (never truncated). Yielding in pieces lets the caller stop between them.
        ``lead_s`` is how much audio the listener already holds: an engine that
        streams inside a unit may start with a bigger (cheaper per second) piece
        when it is not needed at once; one that cannot stream ignores it.
        """
        ...


class EngineError(RuntimeError):
    """A model could not be loaded or run."""
