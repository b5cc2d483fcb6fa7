"""A model cut in two, made once by a child process and kept in the cache directory.

Cutting a graph needs the ``onnx`` package, which costs ~15 MB of RSS that the server
would keep after unloading every model (and ~0.4 s per load). So the server never
imports it: ``cached_cut`` runs ``python -m MODULE MODEL CACHE_DIR`` once, where
MODULE calls ``write_cut`` with its own cutting function, and later loads read the
two halves and their description from the cache. Used for Piper voices
(``vits_split``: encoder | decoder) and Kokoro (``kokoro_cut``: predictor | decoder).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx

__all__ = ["cached_cut", "cut_files", "write_cut"]

# (first half, second half, description for the engine); raises the cutter's own error.
Cutter = Callable[["onnx.ModelProto"], tuple["onnx.ModelProto", "onnx.ModelProto", dict[str, Any]]]


def cut_files(model: Path, cache_dir: Path, folder: str, halves: tuple[str, str]) -> tuple[Path, Path, Path]:
    """Where the halves of ``model`` and their description are kept (named by size and mtime)."""
    stat = model.stat()
    stem = f"{model.stem}-{stat.st_size}-{stat.st_mtime_ns}"
    where = cache_dir / folder
    return where / f"{stem}.{halves[0]}.onnx", where / f"{stem}.{halves[1]}.onnx", where / f"{stem}.json"


def cached_cut(
    module: str, model: Path, cache_dir: Path, folder: str, halves: tuple[str, str], error: type[Exception]
) -> tuple[Path, Path, dict[str, Any]]:
    """The kept halves and description of ``model``, cutting it in a child process first.

    Raises ``error`` when the model cannot be cut (remembered, so it is not retried),
    OSError when the cache cannot be written.
    """
    first, second, meta_path = cut_files(model, cache_dir, folder, halves)
    if not meta_path.is_file():
        meta_path.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", module, str(model), str(cache_dir)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=Path(__file__).resolve().parents[2],  # so a checkout's rtts is found too
        )
        if done.returncode != 0 or not meta_path.is_file():
            raise OSError(f"cutting {model.name} failed: {done.stderr.strip()[-500:]}")
    meta = json.loads(meta_path.read_text())
    if meta.get("error"):
        raise error(meta["error"])
    return first, second, meta


def write_cut(
    model_path: Path, cache_dir: Path, folder: str, halves: tuple[str, str], cut: Cutter, error: type[Exception]
) -> None:
    """In the child: cut the model and write both halves, then the description."""
    import onnx

    first, second, meta_path = cut_files(model_path, cache_dir, folder, halves)
    try:
        a, b, meta = cut(onnx.load(str(model_path)))
    except error as exc:
        meta = {"error": str(exc)}
    else:
        for path, half in ((first, a), (second, b)):
            tmp = path.with_suffix(f".{os.getpid()}.tmp")  # two servers may cut at once
            tmp.write_bytes(half.SerializeToString())
            os.replace(tmp, path)
    # The description is written last: its presence means the halves are complete.
    tmp = meta_path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, meta_path)
