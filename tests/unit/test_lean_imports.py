"""``rtts.lean_imports.without``: inside, a name not imported yet cannot be imported; after,
it imports as ever; a name imported already is left as it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_name_cannot_be_imported_inside_and_can_after() -> None:
    code = """
import sys
from rtts.lean_imports import without
with without("colorsys", "json"):
    try:
        import colorsys
    except ImportError:
        print("refused")
    import json  # imported already by the interpreter's site? then left as it is
import colorsys
print(colorsys.__name__, "colorsys" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", "import json\n" + code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["refused", "colorsys", "True"]


def test_an_error_inside_still_restores() -> None:
    from rtts.lean_imports import without

    name = "rtts_never_imported_module"
    try:
        with without(name):
            assert sys.modules[name] is None
            raise RuntimeError("inside")
    except RuntimeError:
        pass
    assert name not in sys.modules
