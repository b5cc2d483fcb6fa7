"""How long the cache dir keeps a build that a newer one replaced.

Graph cuts (``engines/graph_cut.py``) and the compact front-end tables
(``g2p/compact.py``) are built once per model and rtts version and kept in the cache dir.
A build replaced by another of the same model (new code, a changed model file) is removed
once unused for a week, not at once: another version of rtts may share the dir and
still load it, and removing it at once would have the two build again at every load.
"""

from __future__ import annotations

__all__ = ["REPLACED_S"]

REPLACED_S = 7 * 24 * 3600.0
