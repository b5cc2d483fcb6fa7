"""The Mandarin front end's imports, without the two that it never uses and every wake paid for.

The inference process loads misaki's Mandarin G2P when it wakes (``kokoro_langs``), and
the first Mandarin unit waits for it. Two of its imports did nothing for rtts and were
most of that load (``python -X importtime``, 2-core Xeon, compact tables):

* jieba imports ``pkg_resources`` (62 ms) only to find its own data files, and reads them
  with ``open`` when that import fails (``jieba._compat``); with the compact tables it
  reads none of them at all.
* misaki imports ``cn2an`` (96 ms: it compiles its patterns and builds its province
  tables when imported) to read the Arabic digits left in a sentence
  (``cn2an.transform(text, "an2cn")``). rtts's normalizer has read them already
  (``text.normalize_zh``, in the server), so the inference process gets text with none,
  and for such text that call is the identity (every pattern of ``an2cn`` needs a digit;
  checked over jieba's whole dictionary in tests/unit/test_zh_imports.py). ``cn2an`` is
  imported, and then used for everything, at the first text with a digit in it.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

from rtts.lean_imports import without

__all__ = ["Cn2anOnDemand", "lean"]

# What Python's ``\d`` (the pattern cn2an's ``an2cn`` reads numbers with) calls a digit.
_DIGIT = re.compile(r"\d")


class Cn2anOnDemand(types.ModuleType):
    """``cn2an`` as misaki uses it, importing the real package at the first call that could
    change the text, and for any other name asked of it."""

    def __init__(self) -> None:
        super().__init__("cn2an", __doc__)
        self._lock = threading.Lock()
        self._real: types.ModuleType | None = None

    def transform(self, inputs: str, method: str = "cn2an", direct: bool = False) -> str:
        if method == "an2cn" and not direct and not _DIGIT.search(inputs):
            return inputs
        return self.real().transform(inputs, method, direct)  # type: ignore[no-any-return]

    def real(self) -> types.ModuleType:
        with self._lock:
            if self._real is None:
                if sys.modules.get("cn2an") is self:
                    del sys.modules["cn2an"]
                self._real = importlib.import_module("cn2an")
            return self._real

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system's and copy's questions
            raise AttributeError(name)
        return getattr(self.real(), name)



@contextlib.contextmanager
def lean() -> Iterator[None]:
    """Import Mandarin's front end (jieba, misaki) inside this: jieba without
    ``pkg_resources``, misaki with ``cn2an`` imported on demand. Packages imported
    already are left as they are."""
    if "cn2an" not in sys.modules:
        sys.modules["cn2an"] = Cn2anOnDemand()
    with without("pkg_resources"):  # jieba then reads its files with ``open``
        yield
