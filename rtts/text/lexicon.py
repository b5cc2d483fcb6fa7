"""A pronunciation lexicon kept in the models directory (``lexicon.txt``).

One entry a line, ``word = replacement``; ``#`` starts a comment::

    Nguyen = Win            # a respelling, read in the language of the word it replaces
    Xiaomi = /ʃaʊmi/        # phonemes between slashes (Kokoro's IPA; Piper reads espeak IPA)
    重庆 = 崇庆              # works for Chinese and Japanese words too

Latin words match whole words, ignoring case unless the entry has capitals beyond
the first letter; CJK entries match anywhere. The longest entry wins. Phonemes travel
to the engine between private-use sentinels and are spoken as written.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from rtts.files import read_regular
from rtts.text.origins import Origins, block, identity

log = logging.getLogger(__name__)

PHONEMES_OPEN: Final = "\ue002"
PHONEMES_CLOSE: Final = "\ue003"
FILE_NAME: Final = "lexicon.txt"
MAX_BYTES: Final = 4 << 20  # some 100,000 entries
_SPLIT: Final = re.compile(f"{PHONEMES_OPEN}([^{PHONEMES_CLOSE}]*){PHONEMES_CLOSE}")


@dataclass(frozen=True)
class Lexicon:
    entries: dict[str, str]  # word -> replacement text, or PHONEMES_OPEN...PHONEMES_CLOSE

    @classmethod
    def parse(cls, text: str, origin: str = "lexicon") -> Lexicon:
        entries = {}
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            word, sep, replacement = line.partition("=")
            word, replacement = word.strip(), replacement.strip()
            if not sep or not word or not replacement:
                log.warning("%s line %d: expected 'word = replacement', skipped", origin, n)
                continue
            if len(replacement) > 2 and replacement[0] == "/" and replacement[-1] == "/":
                replacement = PHONEMES_OPEN + replacement[1:-1].strip() + PHONEMES_CLOSE
            entries[word] = replacement
        return cls(entries)

    @classmethod
    def load(cls, path: Path) -> Lexicon:
        """The lexicon at ``path``; empty when there is none, or it cannot be read (logged).

        Only a regular file of at most ``MAX_BYTES`` is read: this runs on the event loop
        for each new session, where a FIFO or a link to /dev/zero would hang the server.
        """
        try:
            return cls.parse(read_regular(path, MAX_BYTES).decode("utf-8"), str(path))
        except FileNotFoundError:
            return cls({})
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            log.warning("cannot read lexicon %s: %s", path, exc)
            return cls({})

    def __bool__(self) -> bool:
        return bool(self.entries)

    def apply(self, text: str) -> str:
        if not self.entries:
            return text
        return self._pattern().sub(lambda m: self._lookup(m.group(0)), text)

    def apply_mapped(self, text: str) -> tuple[str, Origins]:
        """``apply(text)``, and where each of its characters came from: a replacement from
        the word it replaced."""
        if not self.entries:
            return text, identity(len(text))
        pieces: list[str] = []
        origins = identity(0)
        at = 0
        for m in self._pattern().finditer(text):
            replacement = self._lookup(m.group(0))
            pieces.extend((text[at : m.start()], replacement))
            origins = origins + identity(m.start() - at, at) + block(len(replacement), m.start(), m.end())
            at = m.end()
        pieces.append(text[at:])
        return "".join(pieces), origins + identity(len(text) - at, at)

    def _lookup(self, found: str) -> str:
        return self.entries.get(found) or self._folded()[found.lower()]

    def _folded(self) -> dict[str, str]:
        folded = self.__dict__.get("_folded_cache")
        if folded is None:
            folded = {w.lower(): r for w, r in self.entries.items() if _case_free(w)}
            object.__setattr__(self, "_folded_cache", folded)
        return folded

    def _pattern(self) -> re.Pattern[str]:
        pattern = self.__dict__.get("_pattern_cache")
        if pattern is None:
            alts = []
            for word in sorted(self.entries, key=len, reverse=True):
                body = re.escape(word)
                if word.isascii():
                    body = rf"(?<![\w]){body}(?![\w])"
                    if _case_free(word):
                        body = f"(?i:{body})"
                alts.append(body)
            pattern = re.compile("|".join(alts))
            object.__setattr__(self, "_pattern_cache", pattern)
        return pattern


def _case_free(word: str) -> bool:
    """"Nguyen" and "nguyen" match any case; "iPhone" or "NASA" only as written."""
    return word[1:] == word[1:].lower()


def split_phonemes(text: str) -> Iterator[tuple[bool, str]]:
    """(is_phonemes, text) pieces of a text that went through :meth:`Lexicon.apply`."""
    for i, part in enumerate(_SPLIT.split(text)):
        if part:
            yield bool(i % 2), part
