"""Every engine rtts offers, registered here, one line each (see ``engines/base.py``).

Discovery asks the kinds in this order: built-in voices first, then each file of the
models directory is offered to one kind after another until one takes it.
"""

from __future__ import annotations

from rtts.engines.base import EngineKind
from rtts.engines.hibari import HIBARI
from rtts.engines.kokoro import KOKORO
from rtts.engines.piper import PIPER

__all__ = ["DEFAULT_VOICE", "KINDS", "kind"]

KINDS: tuple[EngineKind, ...] = (
    KOKORO,
    PIPER,
    HIBARI,
)

# Hibari heart measured best of the English voices in one run (docs/history/benchmarks.md,
# "English voices"): lower WER than Piper joe, first audio as soon or sooner, a tenth of
# its compute, so more streams at once; Piper and Kokoro stay available.
DEFAULT_VOICE = "hibari/heart"

_BY_NAME = {k.name: k for k in KINDS}


def kind(name: str) -> EngineKind:
    """The kind of engine called ``name``; KeyError when none is registered."""
    return _BY_NAME[name]
