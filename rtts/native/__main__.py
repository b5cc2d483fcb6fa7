"""``python -m rtts.native LIBRARY META COMPILER``: build and check the Snake op library
(run by ``snake_library`` in a child process)."""

import sys
from pathlib import Path

from rtts.native import build

build(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
