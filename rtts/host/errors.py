"""The one error that crosses the inference process's pipe.

A model that cannot be loaded or run fails in the child, is sent back and is raised again
in the parent's ``Host``; engines raise the same error for their own failures. It lives
here, below the engines, because the host raises it and must not import the engines it
serves (``engines/base.py`` names it in the seam).
"""

from __future__ import annotations

__all__ = ["EngineError"]


class EngineError(RuntimeError):
    """A model could not be loaded or run."""
