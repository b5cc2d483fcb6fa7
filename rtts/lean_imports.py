"""Importing a package without one of its optional imports, where rtts measured that the
package's own fallback does the same work for less.

``None`` in ``sys.modules`` makes an import of that name raise ImportError (the import
system's own switch), which the package answers with its fallback. The inference process
uses it as it wakes, when its first words wait for these imports (``g2p.zh_imports``,
``engines.hibari_package``). It is process-wide while inside: only for names nothing
else in the process imports meanwhile.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

__all__ = ["without"]


@contextlib.contextmanager
def without(*names: str) -> Iterator[None]:
    """Inside, importing any of ``names`` not imported already raises ImportError; after,
    they import as ever."""
    blocked = [name for name in names if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
