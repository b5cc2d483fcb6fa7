"""A model cut in two (or edited), made once by a child process and kept in the cache directory.

Cutting a graph needs the ``onnx`` package, which costs ~15 MB of RSS that the server
would keep after unloading every model (and ~0.4 s per load). So the server never
imports it: ``Cut.cached`` runs ``python -m MODULE MODEL FIRST SECOND META`` once, where
MODULE calls ``write_cut`` with its own cutting function, and later loads read the
two halves and their description from the cache. Used for Piper voices
(``vits_split``: encoder | decoder, ``vits_flow``: prior | flow) and Kokoro
(``kokoro_cut``: predictor | decoder); a cut of one "half" is a model edited, not cut
(``hibari_timed``: Hibari with its durations as an output).

A cut is named by what made it, like the optimized graphs of ``host/sessions.py``:
the model file (its path, size and mtime) and the recipe, a hash of the cutting
code's source (every module that takes part, so a changed margin or cut point is a new
recipe) and the onnx version. A cut that failed is remembered under its recipe only,
so new code tries again; and cuts nothing will load again are removed (``_prune``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtts.cache import REPLACED_S

if TYPE_CHECKING:
    import onnx

__all__ = ["Cut", "whole_second", "write_cut"]

# (first half, second half, description for the engine), or (model, description) for a
# cut of one half; raises the cutter's own error.
Cutter = Callable[["onnx.ModelProto"], tuple[Any, ...]]


@dataclass(frozen=True)
class Cut:
    """One way of cutting models in two (or, with one half, of editing one): run by
    ``module``, kept in ``folder``."""

    module: str
    folder: str
    halves: tuple[str, ...]
    uses: tuple[str, ...] = ()  # other modules whose code takes part in the cut
    data: tuple[Path, ...] = ()  # files the cut reads (a calibration table)
    packages: tuple[str, ...] = ("onnx",)  # whose versions take part
    variant: str = ""  # what else the cut depends on (the CPU's exact integer products: conv_gemm)

    def recipe(self) -> str:
        """What makes this cut: the source of the modules that do it, the files they read
        and the versions of the packages they use.

        Worked out once per process, again only when a file it reads changes (size or
        mtime): every load asks, a wake's too, and the student's 6 MB was hashed again
        each time, on a wake's path."""
        stats = [path.stat() for path in self.data]
        return _recipe(self, tuple((st.st_size, st.st_mtime_ns) for st in stats))

    def _recipe(self) -> str:
        digest = hashlib.sha256()
        for module in (self.module, __name__, *self.uses):
            spec = importlib.util.find_spec(module)
            if spec is None or spec.origin is None:
                raise OSError(f"cannot find the source of {module}")
            digest.update(Path(spec.origin).read_bytes())
        for path in self.data:
            digest.update(path.read_bytes())
        for package in self.packages:
            try:
                digest.update(importlib.metadata.version(package).encode())
            except importlib.metadata.PackageNotFoundError:
                pass  # the cut itself will say so
        digest.update(self.variant.encode())
        return digest.hexdigest()[:12]

    def files(self, model: Path, cache_dir: Path) -> tuple[Path, ...]:
        """Where the halves of ``model`` are kept, in order, and last their description."""
        stat = model.stat()
        where = hashlib.sha256(str(model.resolve()).encode()).hexdigest()[:8]
        stem = f"{model.name.removesuffix('.onnx')}-{where}-{stat.st_size}-{stat.st_mtime_ns}-{self.recipe()}"
        folder = cache_dir / self.folder
        return (*(folder / f"{stem}.{half}.onnx" for half in self.halves), folder / f"{stem}.json")

    def cached(self, model: Path, cache_dir: Path, error: type[Exception]) -> tuple[Any, ...]:
        """The kept halves (paths) and description of ``model``, cutting it in a child process first.

        Raises ``error`` when the model cannot be cut by this recipe (remembered until the
        recipe changes), OSError when the cache cannot be written. Marks the cut used, and
        removes those nothing will use again (``_prune``).
        """
        *halves, meta_path = self.files(model, cache_dir)
        if not meta_path.is_file():
            meta_path.parent.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                [sys.executable, "-m", self.module, str(model), *map(str, halves), str(meta_path)],
                capture_output=True,
                text=True,
                timeout=300,
                cwd=Path(__file__).resolve().parents[2],  # so a checkout's rtts is found too
            )
            if done.returncode != 0 or not meta_path.is_file():
                raise OSError(f"cutting {model.name} failed: {done.stderr.strip()[-500:]}")
        else:
            with contextlib.suppress(OSError):
                os.utime(meta_path)  # its mtime says when it was last used (see _prune)
        _prune(meta_path, model)
        meta = json.loads(meta_path.read_text())
        if meta.get("error"):
            raise error(meta["error"])
        return (*halves, meta)


@functools.cache
def _recipe(cut: Cut, stamps: tuple[tuple[int, int], ...]) -> str:
    return cut._recipe()


def _prune(kept: Path, model: Path, now: float | None = None) -> None:
    """Remove the cuts in ``kept``'s folder that nothing will load again: those whose model
    is gone (a Piper encoder half cut again), and, once unused for REPLACED_S, other cuts
    of ``model`` (another size, mtime or recipe) and those of an earlier build, which did
    not record their model. Another version of rtts may share this cache dir and still use
    those: removing them at once would have the two cut again at every load."""
    keep = kept.name.removesuffix(".json")
    cutoff = (time.time() if now is None else now) - REPLACED_S
    for meta_path in kept.parent.glob("*.json"):
        stem = meta_path.name.removesuffix(".json")
        if stem == keep:
            continue
        try:
            source = json.loads(meta_path.read_text()).get("source")
            unused = meta_path.stat().st_mtime < cutoff
        except (OSError, ValueError, AttributeError):
            continue  # being written by another server, or not ours
        if (source in (None, str(model)) and unused) or (source is not None and not Path(source).exists()):
            for old in kept.parent.iterdir():
                if old.name.startswith(stem + "."):
                    with contextlib.suppress(OSError):
                        old.unlink()


def whole_second(path: Path) -> None:
    """Drop the fraction of a second from ``path``'s mtime. What is made from a model is
    named (and Kokoro's model stamped) by the model file's size and mtime, and an image
    layer keeps only whole seconds of an mtime (docker truncates, podman rounds): the model
    files rtts makes while a container image is built must carry no fraction, or every
    name would change on the way into the container and the first requests would make
    everything again (tests/system/test_container.py)."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns // 1_000_000_000 * 1_000_000_000))


def write_cut(argv: list[str], cut: Cutter, error: type[Exception]) -> None:
    """In the child (``argv``: MODEL FIRST [SECOND] META): cut the model and write its
    halves, then the description."""
    import onnx

    model_path, *paths, meta_path = (Path(a) for a in argv)
    try:
        *halves, meta = cut(onnx.load(str(model_path)))
    except error as exc:
        meta = {"error": str(exc)}
    else:
        for path, half in zip(paths, halves, strict=True):
            tmp = path.with_suffix(f".{os.getpid()}.tmp")  # two servers may cut at once
            tmp.write_bytes(half.SerializeToString())
            whole_second(tmp)  # a half is cut in turn (Piper's encoder) and optimized by its mtime
            os.replace(tmp, path)
    meta["source"] = str(model_path)  # so that a cut of a model that is gone can be removed
    # The description is written last: its presence means the halves are complete.
    tmp = meta_path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, meta_path)
