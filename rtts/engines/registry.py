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

# Piper is about six times faster than Kokoro on a small CPU, so it answers first by default.
DEFAULT_VOICE = "piper/en_US-joe-medium"

_BY_NAME = {k.name: k for k in KINDS}


def kind(name: str) -> EngineKind:
    """The kind of engine called ``name``; KeyError when none is registered."""
    return _BY_NAME[name]
