"""The inference process's ONNX Runtime sessions, tuned for a small CPU-only machine.

Runs in the child only (``rtts.host.child``); the parent reaches these sessions through
``client.RemoteSession``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rtts.host.errors import EngineError

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = ["UNUSED_S", "Sessions", "open_session", "optimized_path", "run_options", "session_options"]

# An optimized copy not loaded for this long is removed (at the next load of any model).
UNUSED_S = 30 * 24 * 3600.0

logger = logging.getLogger(__name__)


def session_options(threads: int, custom_ops: Path | None = None) -> ort.SessionOptions:
    """Options for one model on a box with few cores and one inference thread; with
    ``custom_ops``, that library's operators too (rtts/native)."""
    # Imported here so that listing voices does not pay for loading onnxruntime.
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, threads)
    # One request runs at a time, so parallel graph branches would only fight for the same cores.
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Spinning worker threads burn a whole core between requests (and between the
    # short ops of these models) that the event loop and the other model need.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    # Every request has a different input length, so a memory pattern planned for one
    # run does not fit the next; the arena, though, is worth keeping. Measured on the
    # 2-core box (ORT 1.32, 2 threads, sentences of 1-30 words in a row, other jobs
    # running, so RTFs are noisy; peak RSS is stable):
    #                          Kokoro int8            Piper joe-medium
    #   pattern on,  arena on  RTF 1.07-1.25, 570 MB  RTF 0.12-0.16, 373-483 MB
    #   pattern off, arena on  RTF 1.01-1.17, 402 MB  RTF 0.09-0.15, 330-332 MB  <- chosen
    #   pattern on,  arena off RTF 1.25-1.41, 1.8-2.0 GB peak  0.12-0.15, 440-450 MB
    #   pattern off, arena off RTF 1.26-1.60, 1.7-1.8 GB peak  0.10-0.15, 420-430 MB
    # Without the arena, RSS between requests is lower (Piper 180-250 MB) but the
    # peaks, which decide whether the box swaps, are far higher.
    opts.enable_mem_pattern = False
    opts.enable_cpu_mem_arena = True
    opts.log_severity_level = 3  # ORT's warnings about unused initializers are noise for users
    if custom_ops is not None:
        opts.register_custom_ops_library(str(custom_ops))
    return opts


def open_session(
    model: Path | bytes,
    threads: int,
    name: str = "",
    cache_dir: Path | None = None,
    custom_ops: Path | None = None,
) -> ort.InferenceSession:
    """Open a model file (or serialized bytes) on the CPU provider, in this process;
    EngineError when unusable.

    With ``cache_dir``, a model file's graph, once optimized, is kept there and later
    loads skip the optimizer: Kokoro then loads in 0.37 s instead of 1.0 s (2-core box,
    ORT 1.32), which is most of what a cold connection waits for. The result is the
    same graph, so the audio is identical (checked in tests/live/test_engines.py).
    """
    import onnxruntime as ort

    start = time.perf_counter()
    name = name or (model.name if isinstance(model, Path) else "model")
    session = None
    if cache_dir is not None and isinstance(model, Path):
        session = _load_optimized(model, threads, cache_dir, custom_ops)
    try:
        if session is None:
            session = ort.InferenceSession(
                model if isinstance(model, bytes) else str(model),
                sess_options=session_options(threads, custom_ops),
                providers=["CPUExecutionProvider"],
            )
    except Exception as exc:  # ORT raises its own Fail/InvalidProtobuf/NoSuchFile types
        raise EngineError(f"cannot load ONNX model {name}: {exc}") from exc
    logger.debug("loaded %s in %.2f s (%d threads)", name, time.perf_counter() - start, threads)
    return session


def optimized_path(model: Path, cache_dir: Path) -> Path:
    """Where the optimized graph of ``model`` is kept. An optimized graph may use
    kernels and layouts of this CPU and this ORT version, so both are in the name,
    with the model file's size and mtime."""
    import onnxruntime as ort

    stat = model.stat()
    cpu = hashlib.sha256(_cpu_flags().encode()).hexdigest()[:12]
    stem = model.name.removesuffix(".onnx")
    return cache_dir / "ort-optimized" / f"{stem}-{stat.st_size}-{stat.st_mtime_ns}-ort{ort.__version__}-{cpu}.onnx"


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return next((line for line in f if line.startswith("flags")), platform.processor())
    except OSError:
        return platform.machine() + platform.processor()


def _load_optimized(
    model: Path, threads: int, cache_dir: Path, custom_ops: Path | None = None
) -> ort.InferenceSession | None:
    """The session from the kept optimized graph, making that graph on the first load;
    None when neither works (the caller then loads ``model`` plainly)."""
    import onnxruntime as ort

    try:
        target = optimized_path(model, cache_dir)
    except OSError:
        return None
    if target.is_file():
        opts = session_options(threads, custom_ops)
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            session = ort.InferenceSession(str(target), sess_options=opts, providers=["CPUExecutionProvider"])
            with contextlib.suppress(OSError):
                os.utime(target)  # its mtime says when it was last used (see _prune_unused)
            _prune_unused(target.parent)
            return session
        except Exception as exc:  # a truncated or foreign file: make it again below
            logger.warning("ignoring the optimized copy %s: %s", target, exc)
            target.unlink(missing_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        opts = session_options(threads, custom_ops)
        opts.optimized_model_filepath = str(tmp)
        session = ort.InferenceSession(str(model), sess_options=opts, providers=["CPUExecutionProvider"])
        os.replace(tmp, target)
    except Exception as exc:  # a read-only cache, a full disk: load without keeping it
        logger.info("not keeping an optimized copy of %s: %s", model.name, exc)
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return None
    # Copies for an older file, ORT version or CPU are never used again.
    prefix = model.name.removesuffix(".onnx") + "-"
    for old in target.parent.glob(prefix + "*.onnx"):
        if old != target and old.name[len(prefix) :].split("-", 1)[0].isdigit():
            old.unlink(missing_ok=True)
    _prune_unused(target.parent)
    return session


def _prune_unused(folder: Path, now: float | None = None) -> None:
    """Remove optimized copies not loaded for UNUSED_S: the model they were made from is
    no longer run that way (Kokoro's whole model once it runs cut: 92 MB) or is gone.
    Run at every load that uses the folder."""
    cutoff = (time.time() if now is None else now) - UNUSED_S
    for old in folder.glob("*.onnx"):
        with contextlib.suppress(OSError):
            if old.stat().st_mtime < cutoff:
                old.unlink()


@functools.cache
def run_options() -> Any:
    """Run options that give the arena's memory back after every run: a long unit (250
    Han characters through Kokoro) grows the arena by hundreds of MB, and without
    shrinkage the process keeps that until the idle unload (Hibari's session kept
    +100 MB after its longest units). Measured with benchmarks/hostile.py and
    benchmarks/memory_parts.py (docs/history/benchmarks.md, "Hostile messages", "Memory")."""
    if os.environ.get("RTTS_ORT_ARENA_SHRINK", "1") == "0":
        return None
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


class Sessions:
    """The child's sessions, by the id the parent gave each."""

    def __init__(self) -> None:
        self._by_id: dict[int, Any] = {}

    def load(
        self, sid: int, model: str | bytes, threads: int, name: str, cache_dir: str | None,
        custom_ops: str | None = None,
    ) -> None:
        source = model if isinstance(model, bytes) else Path(model)
        cache = None if cache_dir is None else Path(cache_dir)
        library = None if custom_ops is None else Path(custom_ops)
        self._by_id[sid] = open_session(source, threads, name, cache, library)

    def inputs(self, sid: int) -> list[str]:
        return [i.name for i in self._by_id[sid].get_inputs()]

    def run(self, sid: int, names: list[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self._by_id[sid].run(names, feeds, run_options())

    def drop(self, sid: int) -> None:
        self._by_id.pop(sid, None)
