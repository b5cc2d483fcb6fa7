"""The child process that cuts Kokoro with its Snakes as native ops (``kokoro_cut.SNAKE_CUT``):
``python -m rtts.engines.snake_cut MODEL FIRST SECOND META``.

A module of its own because ``kokoro_cut`` imports ``snake`` for the rewrite, and an
entry point there would import ``kokoro_cut`` back (a circle).
"""

from __future__ import annotations

import sys
from functools import partial

from rtts.engines.graph_cut import write_cut
from rtts.engines.kokoro_cut import CutError, cut_kokoro

if __name__ == "__main__":
    write_cut(sys.argv[1:], partial(cut_kokoro, native_snake=True), CutError)
