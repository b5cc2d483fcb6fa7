"""The folders are the layers (rtts/__init__.py): each imports only from the layers below it,
and no import, type-only ones included, closes a circle between modules or folders. The
contracts are in pyproject.toml's [tool.importlinter]; `lint-imports` says the same from
the command line."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# In a child: import-linter configures logging for the whole process (it would silence
# every other test's loggers), and the child finds the rtts beside pyproject.toml, not an
# installed copy. No cache is written into the clean clone.
LINT = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_no_import_goes_up_a_layer_or_closes_a_circle() -> None:
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_contracts_fail_on_an_upward_import_and_on_a_circle(tmp_path: Path) -> None:
    """The check can fail: in a copy of the package, a leaf that imports a transport and two
    modules of one folder that import each other each break a contract."""
    shutil.copytree(ROOT / "rtts", tmp_path / "rtts", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    rules = tmp_path / "rtts" / "text" / "rules.py"
    rules.write_text(rules.read_text() + "\nfrom rtts.serve import access  # noqa: E402,F401\n")
    pcm = tmp_path / "rtts" / "sound" / "audio.py"
    pcm.write_text(pcm.read_text() + "\nfrom rtts.sound import track  # noqa: E402,F401\n")
    done = lint(tmp_path)
    assert done.returncode != 0, done.stdout
    assert "rtts.text is not allowed to import rtts.serve" in done.stdout, done.stdout
    assert "Contracts: 0 kept, 2 broken." in done.stdout, done.stdout
