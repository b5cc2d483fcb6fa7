"""Piper VITS voices (``X.onnx`` with its ``X.onnx.json``) as an Engine.

Piper models take phoneme ids, not text: espeak-ng phonemizes with the voice named in
the json, each phoneme (a Unicode code point after NFD) is looked up in the json's
``phoneme_id_map``, and ids are framed the way Piper was trained. Speech is produced
one sentence at a time so the caller gets the first sentence early.
"""

from __future__ import annotations

import json
import logging
import math
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rtts.engines import ort
from rtts.engines.base import EngineError, VoiceInfo
from rtts.engines.trim import trim_silence
from rtts.g2p import espeak
from rtts.g2p.split import split_phonemes
from rtts.text.lexicon import split_phonemes as split_lexicon
from rtts.text.normalize_en import normalize_en

__all__ = ["PiperConfig", "PiperEngine", "phoneme_ids"]

logger = logging.getLogger(__name__)

_PAD, _BOS, _EOS = "_", "^", "$"
# VITS has no hard input limit, but cost and memory grow with length; pieces this long
# (roughly half a minute of speech) keep a run bounded without cutting normal sentences.
_MAX_PHONEMES = 600
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+")


@dataclass(frozen=True)
class PiperConfig:
    """What rtts needs from a voice's ``.onnx.json``."""

    sample_rate: int
    espeak_voice: str
    phoneme_id_map: Mapping[str, tuple[int, ...]]
    phoneme_map: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    noise_scale: float = 0.667
    length_scale: float = 1.0
    noise_w: float = 0.8
    num_speakers: int = 1
    speaker_id_map: Mapping[str, int] = field(default_factory=dict)
    language: str = ""  # ISO 639-1, e.g. "en"

    @classmethod
    def from_json(cls, path: Path) -> PiperConfig:
        """Parse a Piper voice config; raise ValueError when it is unusable here."""
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read {path}: {exc}") from exc
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: not a JSON object")
        try:
            return cls._parse(raw)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{path}: not a usable Piper voice config ({exc!r})") from exc

    @classmethod
    def _parse(cls, raw: dict[str, Any]) -> PiperConfig:
        phoneme_type = raw.get("phoneme_type", "espeak")
        if phoneme_type != "espeak":
            raise ValueError(f"phoneme_type {phoneme_type!r} is not supported (only espeak)")
        espeak_voice = str(raw["espeak"]["voice"])
        inference = raw.get("inference") or {}
        id_map = {str(k): tuple(int(i) for i in v) for k, v in raw["phoneme_id_map"].items()}
        for symbol in (_PAD, _BOS, _EOS):
            if symbol not in id_map:
                raise ValueError(f"phoneme_id_map lacks {symbol!r}")
        language = raw.get("language") or {}
        code = str(language.get("code") or language.get("family") or espeak_voice)
        return cls(
            sample_rate=int(raw["audio"]["sample_rate"]),
            espeak_voice=espeak_voice,
            phoneme_id_map=id_map,
            phoneme_map={str(k): tuple(str(p) for p in v) for k, v in (raw.get("phoneme_map") or {}).items()},
            noise_scale=float(inference.get("noise_scale", 0.667)),
            length_scale=float(inference.get("length_scale", 1.0)),
            noise_w=float(inference.get("noise_w", 0.8)),
            num_speakers=int(raw.get("num_speakers", 1)),
            speaker_id_map={str(k): int(v) for k, v in (raw.get("speaker_id_map") or {}).items()},
            # "en_US" and "en-us" both mean "en".
            language=re.split(r"[_-]", code, maxsplit=1)[0].lower(),
        )


def phoneme_ids(phonemes: str, config: PiperConfig) -> list[int]:
    """Piper's framing: BOS, pad, then every phoneme followed by pad, then EOS.

    Phonemes missing from the voice's map are skipped (Piper logs and skips them too).
    """
    id_map = config.phoneme_id_map
    pad = id_map[_PAD]
    ids = [*id_map[_BOS], *pad]
    for ch in unicodedata.normalize("NFD", phonemes):
        for phoneme in config.phoneme_map.get(ch, (ch,)):
            mapped = id_map.get(phoneme)
            if mapped is None:
                logger.debug("skipping phoneme %r missing from the voice's id map", phoneme)
                continue
            ids.extend(mapped)
            ids.extend(pad)
    ids.extend(id_map[_EOS])
    return ids


class PiperEngine:
    """One Piper voice model (with all of its speakers)."""

    def __init__(self, key: str, model_path: Path, config: PiperConfig, threads: int = 2) -> None:
        self.key = key
        self.sample_rate = config.sample_rate
        self.model_path = model_path
        self.config = config
        self._threads = threads
        self._session = None
        self._has_sid = False

    @classmethod
    def from_files(cls, model_path: Path, config_path: Path | None = None, threads: int = 2) -> PiperEngine:
        """Engine for ``X.onnx`` and ``X.onnx.json`` keyed ``piper/X``; ValueError for a bad config."""
        config = PiperConfig.from_json(config_path or model_path.with_name(model_path.name + ".json"))
        return cls(f"piper/{model_path.name.removesuffix('.onnx')}", model_path, config, threads)

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def load(self) -> None:
        if self._session is not None:
            return
        session = ort.create_session(self.model_path, self._threads)
        names = {i.name for i in session.get_inputs()}
        if not {"input", "input_lengths", "scales"} <= names:
            raise EngineError(f"{self.model_path} is not a Piper model: inputs are {sorted(names)}")
        self._has_sid = "sid" in names
        self._session = session

    def unload(self) -> None:
        if self._session is None:
            return
        self._session = None
        ort.release_memory()

    def phonemize(self, text: str) -> str:
        """espeak-ng IPA for ``text`` in this voice's espeak voice, as Piper feeds it.

        English text is normalized first (numbers, dates, money...); lexicon phonemes
        pass through as written.
        """
        english = self.config.language == "en"

        def g2p(piece: str) -> str:
            return espeak.phonemize(normalize_en(piece) if english else piece, self.config.espeak_voice)

        return " ".join(
            p.strip() for p in (piece if ph else g2p(piece) for ph, piece in split_lexicon(text)) if p.strip()
        )

    def synthesize(self, text: str, voice: VoiceInfo, lang: str, speed: float) -> Iterator[np.ndarray]:
        if not (math.isfinite(speed) and speed > 0):
            raise ValueError(f"speed must be a positive number, not {speed!r}")
        if lang not in voice.langs:
            raise ValueError(f"voice {voice.id} speaks {', '.join(voice.langs)}, not {lang!r}")
        speaker = self._speaker_id(voice)
        phonemes = self.phonemize(text)
        return self._generate(phonemes, speaker, speed)

    def _generate(self, phonemes: str, speaker: int | None, speed: float) -> Iterator[np.ndarray]:
        if not phonemes:
            return
        self.load()
        for sentence in _SENTENCE_END.split(phonemes):
            for piece in split_phonemes(sentence, _MAX_PHONEMES):
                audio = self._run(phoneme_ids(piece, self.config), speaker, speed)
                if audio.size:
                    yield audio

    def _speaker_id(self, voice: VoiceInfo) -> int | None:
        if self.config.num_speakers <= 1:
            return None
        try:
            speaker = int(voice.speaker or 0)
        except ValueError:
            raise ValueError(f"voice {voice.id} has a bad speaker id {voice.speaker!r}") from None
        if not 0 <= speaker < self.config.num_speakers:
            raise ValueError(f"voice {voice.id}: speaker {speaker} out of range")
        return speaker

    def _run(self, ids: list[int], speaker: int | None, speed: float) -> np.ndarray:
        session = self._session
        if session is None:
            raise EngineError(f"{self.key} was unloaded during synthesis")
        cfg = self.config
        feeds = {
            "input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": np.array([cfg.noise_scale, cfg.length_scale / speed, cfg.noise_w], dtype=np.float32),
        }
        if self._has_sid and speaker is not None:
            feeds["sid"] = np.array([speaker], dtype=np.int64)
        try:
            out = session.run(None, feeds)[0]
        except Exception as exc:  # ORT's own exception types
            raise EngineError(f"{self.key} inference failed: {exc}") from exc
        audio = np.clip(np.asarray(out, dtype=np.float32).ravel(), -1.0, 1.0)
        return trim_silence(audio, self.sample_rate)
