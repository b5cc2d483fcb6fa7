"""A bounded cache of synthesized text units, for texts that are spoken again and again.

A kiosk says "Please mind the gap." hundreds of times a day; synthesizing it once
and replaying the samples costs nothing and starts at once. Entries are whole text
units (what a ``Job`` speaks) keyed by everything that changes the audio: voice,
language, speed, the waveform generator asked for and the text itself (and whether its word timing is kept with it, and
whether it is an announcement's, made the same way on every instance whatever the load:
a private stream's may be cut into runs by it). Least recently used entries are dropped first
once the samples held pass ``max_bytes``. Used from the event loop (lookups) and the
inference thread (stores), hence the lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from rtts.engines.base import Timing

__all__ = ["PhraseCache"]

Key = tuple[str, str, float, str, bool, bool, str | None]
Chunk = np.ndarray | Timing


class PhraseCache:
    def __init__(self, max_bytes: int, max_chars: int = 200) -> None:
        self.max_bytes = max_bytes
        # Long texts are rarely repeated word for word; keeping them would only evict the short ones.
        self.max_chars = max_chars
        self._entries: OrderedDict[Key, tuple[Chunk, ...]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(
        voice: str, lang: str, speed: float, text: str, words: bool = False, shared: bool = False,
        generator: str | None = None,
    ) -> Key:
        return (voice, lang, round(float(speed), 3), text, words, shared, generator)

    def cacheable(self, text: str) -> bool:
        return self.max_bytes > 0 and 0 < len(text) <= self.max_chars

    def get(self, key: Key) -> tuple[Chunk, ...] | None:
        """The chunks spoken for ``key`` (counted as a hit or a miss)."""
        with self._lock:
            chunks = self._entries.get(key)
            if chunks is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return chunks

    def peek(self, key: Key) -> bool:
        """Whether ``key`` is cached, without counting a hit or a miss."""
        with self._lock:
            return key in self._entries

    def put(self, key: Key, chunks: list[Chunk]) -> None:
        size = _size(chunks)
        if size > self.max_bytes or not chunks:
            return
        frozen: list[Chunk] = []
        for chunk in chunks:
            if isinstance(chunk, Timing):
                frozen.append(chunk)
                continue
            copy = np.array(chunk, dtype=np.float32, copy=True)
            copy.flags.writeable = False  # every replay shares these arrays
            frozen.append(copy)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= _size(old)
            self._entries[key] = tuple(frozen)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= _size(dropped)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)


def _size(chunks: "list[Chunk] | tuple[Chunk, ...]") -> int:
    """Bytes of the samples held (a Timing's few words are not counted)."""
    return sum(c.nbytes for c in chunks if isinstance(c, np.ndarray))
