"""A fixed catalog of voices for session tests (what ``service._CatalogView`` is live)."""

from __future__ import annotations

from rtts.engines.base import VoiceInfo
from rtts.engines.registry import kind
from rtts.engines.voices import routes
from rtts.synthesis.jobs import Estimate, Job


class FixedCatalog:
    """``voices`` with their engines' own routing and first-unit lengths, unless given."""

    def __init__(
        self,
        voices: dict[str, VoiceInfo],
        default_voice: str,
        lang_voices: tuple[tuple[str, str], ...] | None = None,
        first_unit_chars: dict[str, int] | None = None,
        loaded: list[str] | None = None,
        first_audio: dict[str, tuple[float, float]] | None = None,
    ) -> None:
        self.voices = voices
        self.default_voice = default_voice
        pairs = lang_voices
        if pairs is None:
            pairs = tuple(p for name in {v.engine for v in voices.values()} for p in kind(name).lang_voices)
        self.lang_voices = routes(voices, default_voice, pairs)
        self._first_unit = first_unit_chars or {}
        self._loaded = loaded or []
        # Per engine: (compute seconds before its first audio, seconds of audio) per
        # character. Unless given, every voice starts at once and speaks slowly: no opening
        # part is kept back (Session._outruns).
        self._first_audio = first_audio or {}

    def loaded_voices(self) -> list[str]:
        return list(self._loaded)

    def first_unit_chars(self, engine: str, lang: str | None = None) -> int:
        own = dict(kind(engine).first_unit_chars_by_lang).get(lang or "", kind(engine).first_unit_chars)
        return self._first_unit.get(engine, own)

    def estimate(self, job: Job, room: float | None = None) -> Estimate:
        return Estimate(0.0, 0.0, 0.0)  # an idle inference thread

    def first_audio_s(self, voice: VoiceInfo, lang: str, text: str) -> tuple[float, float]:
        compute, audio = self._first_audio.get(voice.engine, (0.0, 1.0))
        return compute * len(text), audio * len(text)

    def next_run_s(self, voice: VoiceInfo, lang: str, text: str, generator: str | None = None) -> float:
        return self.first_audio_s(voice, lang, text)[0]

    def capacity(self) -> dict[str, int]:
        return {name: 1 for name in sorted({v.engine for v in self.voices.values()})}

    def thread_load(self, job: Job) -> tuple[float, int]:
        return 0.0, 0  # an idle inference thread
