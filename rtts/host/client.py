"""The parent's side of the inference process (see ``rtts.host``).

``Host`` starts the child on first use and ends it when its last session is released.
``RemoteSession`` looks to an engine like ``onnxruntime.InferenceSession`` (``run`` and
``get_inputs``). Calls go over a pipe as pickled tuples; a call is a few hundred
microseconds, small beside a model run. Only the inference thread makes calls (and a
lock keeps any other caller in order). Every answer is awaited with a timeout: a child
that hangs is ended and the call fails, instead of holding the inference thread until
the systemd watchdog restarts the whole service.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import logging
import os
import subprocess
import sys
import threading
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from rtts.host.errors import EngineError

__all__ = ["Host", "RemoteSession"]

logger = logging.getLogger(__name__)

# How long an answer may take: a model load (which may optimize the graph first) and
# anything else. Runs of a long unit take seconds on a slow box; a minute is a hang.
LOAD_TIMEOUT_S = 300.0
CALL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class _Input:
    name: str


class RemoteSession:
    """An ONNX Runtime session that lives in the host's child process."""

    def __init__(self, host: Host, sid: int, generation: int, inputs: Sequence[str], spec: tuple) -> None:
        self._host = host
        self._at = [sid, generation]  # where it lives; changes when it is loaded again
        self._inputs = tuple(_Input(name) for name in inputs)
        self._spec = spec  # how to load it again in a new child
        weakref.finalize(self, host.drop, self._at)

    def get_inputs(self) -> tuple[_Input, ...]:
        return self._inputs

    def run(self, output_names: Sequence[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        with self._host.lock:
            if self._at[1] != self._host.generation or not self._host.running:
                # The child this session lived in has died: load it again in the new one.
                self._at[:] = self._host.reload(self._spec)
            return self._host._call("run", self._at[0], list(output_names) if output_names else None, feeds)


class Host:
    """The child process and the sessions in it.

    ``ops`` names the engines' own requests: op name → ``"module:function"``, which the
    child imports on first use and calls with the request's arguments.
    """

    def __init__(
        self,
        ops: Mapping[str, str] | None = None,
        *,
        call_timeout_s: float = CALL_TIMEOUT_S,
        load_timeout_s: float = LOAD_TIMEOUT_S,
    ) -> None:
        self.lock = threading.RLock()
        self._ops = dict(ops or {})
        self._call_timeout_s = call_timeout_s
        self._load_timeout_s = load_timeout_s
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None  # to the child
        self._from: Connection | None = None  # from the child
        # Ends the child: at _stop, or when this Host is garbage-collected with one running.
        self._end: weakref.finalize | None = None
        self._next_sid = 0
        self._live: set[int] = set()
        # Sessions garbage-collected since the last call. A finalizer can run in the
        # middle of a send on this very thread, so it only notes the id here.
        self._dropped: deque[list[int]] = deque()
        self.generation = 0  # bumped whenever a new child starts
        self._asked = False  # the child has had a request (a spare has not)
        self.starts = 0

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running and self._proc is not None else None

    def resident_bytes(self) -> int:
        """The child's RSS (Linux), 0 when there is no child."""
        pid = self.pid
        if pid is None:
            return 0
        try:
            with open(f"/proc/{pid}/statm", encoding="ascii") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    def anonymous_bytes(self) -> int:
        """The child's anonymous memory (``memory.anonymous_bytes``), 0 when there is none."""
        from rtts.host.memory import anonymous_bytes

        pid = self.pid
        return 0 if pid is None else anonymous_bytes(pid)

    def open(
        self, model: Path | bytes, threads: int, name: str = "", cache_dir: Path | None = None,
        custom_ops: Path | None = None,
    ) -> RemoteSession:
        """Load a model file (or serialized bytes) in the child, starting it if needed;
        EngineError when it cannot. With ``cache_dir`` the optimized graph is kept
        there (``sessions.open_session``); ``custom_ops`` is a library of operators the
        model uses (rtts/native)."""
        spec = (model, threads, name, cache_dir, custom_ops)
        with self.lock:
            sid, generation = self.reload(spec)
            inputs = self._call("inputs", sid)
        return RemoteSession(self, sid, generation, inputs, spec)

    def call(self, op: str, *args: Any) -> Any:
        """An engine's own request (``ops``) to the child, starting it if needed; its
        answer, or EngineError when it fails or the child dies or does not answer in time."""
        with self.lock:
            self._ensure_child()
            return self._call(op, *args)

    def _call(self, op: str, *args: Any) -> Any:
        with self.lock:
            if not self.running:
                self._lost("is not running")
            self._asked = True
            self._flush_drops()
            self._send((op, *args))
            timeout = self._load_timeout_s if op == "load" else self._call_timeout_s
            try:
                if self._from is None:
                    raise EOFError
                if not self._from.poll(timeout):  # True on an answer and on end of file
                    self._lost(f"did not answer {op!r} in {timeout:g} s", kill=True)
                status, value = self._from.recv()
            except (EOFError, OSError) as exc:
                self._lost(f"ended ({str(exc) or 'its pipe closed'})")
            if status == "err":
                raise EngineError(value)
            return value

    def reload(self, spec: tuple) -> tuple[int, int]:
        model, threads, name, cache_dir, custom_ops = spec
        with self.lock:
            self._ensure_child()
            self._next_sid += 1
            sid = self._next_sid
            self._call("load", sid, model if isinstance(model, bytes) else str(model), threads, name,
                      None if cache_dir is None else str(cache_dir),
                      None if custom_ops is None else str(custom_ops))
            self._live.add(sid)
            return sid, self.generation

    def drop(self, at: list[int]) -> None:
        """A session was garbage-collected (its finalizer): free it at the next call."""
        self._dropped.append(at)

    def release(self) -> None:
        """End the child if no session is left in it: its memory goes back to the OS
        (the engines' front ends' too: the next request loads them again). Then ask
        glibc to hand this process's freed heap pages back as well: without that an
        unloaded model's buffers stay in RSS (158 MB after unloading Piper, 67 MB with
        the trim)."""
        with self.lock:
            self._flush_drops()
            # A child nothing was asked of (a spare, ``prestart``) holds nothing to give back.
            if not self._live and self._proc is not None and self._asked:
                self._stop()
        _trim_heap()

    def prestart(self) -> None:
        """Start a child now if none runs, loading nothing: the next load finds Python,
        numpy and ONNX Runtime imported (90-140 ms of a wake on two cores,
        docs/benchmarks.md) and costs only its sessions. A child that cannot start is
        left to the next call to report."""
        with self.lock:
            try:
                self._ensure_child()
            except EngineError as exc:
                logger.warning("cannot start a spare inference process: %s", exc)

    def stop(self) -> None:
        """End the child now, whatever lives in it (the service is stopping)."""
        with self.lock:
            self._stop()

    def _flush_drops(self) -> None:
        while self._dropped:
            sid, generation = self._dropped.popleft()
            if generation == self.generation and sid in self._live:
                self._live.discard(sid)
                if self.running:
                    self._send(("drop", sid))  # no answer: the child just forgets it

    def _send(self, message: tuple) -> None:
        if self._conn is None:
            self._lost("is not running")
        try:
            self._conn.send(message)
        except (OSError, ValueError) as exc:
            self._lost(f"cannot be reached ({exc})")

    def _lost(self, why: str, kill: bool = False) -> NoReturn:
        code = None
        if self._proc is not None:
            if kill:
                self._proc.kill()
            try:
                code = self._proc.wait(1.0)  # a crash has just closed the pipe: the code follows
            except subprocess.TimeoutExpired:
                pass
        self._stop()
        raise EngineError(f"the inference process {why}; exit code {code}")

    def _ensure_child(self) -> None:
        if self.running:
            return
        self._stop()
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "rtts.host.child", str(to_child_r), str(from_child_w), json.dumps(self._ops)],
                pass_fds=(to_child_r, from_child_w),
                stdin=subprocess.DEVNULL,
                cwd=Path(__file__).resolve().parents[2],  # so a checkout's rtts is found too
                env={**os.environ, **CHILD_MALLOC},
            )
        except OSError as exc:
            for fd in (to_child_r, to_child_w, from_child_r, from_child_w):
                os.close(fd)
            raise EngineError(f"cannot start the inference process: {exc}") from exc
        os.close(to_child_r)
        os.close(from_child_w)
        self._conn = Connection(to_child_w, readable=False)
        self._from = Connection(from_child_r, writable=False)
        self._end = weakref.finalize(self, _end_child, self._proc, self._conn, self._from)
        self.generation += 1
        self.starts += 1
        self._asked = False
        self._live.clear()
        logger.debug("inference process %d started", self._proc.pid)

    def _stop(self) -> None:
        end, self._end = self._end, None
        self._proc = self._conn = self._from = None
        self._live.clear()
        if end is not None:
            end()


# glibc raises its mmap threshold as large blocks are freed, so after one long unit the
# next ones come from the heap, which is never given back: the inference process kept
# 300-400 MB after a 5,000-character request (benchmarks/hostile.py). A fixed threshold
# keeps blocks of 256 KiB and more in their own mappings, returned to the system when
# ONNX Runtime's arena shrinks after a run (host/sessions.py).
CHILD_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(256 * 1024), "MALLOC_TRIM_THRESHOLD_": str(1024 * 1024)}


def _end_child(proc: subprocess.Popen, *pipes: Connection) -> None:
    for conn in pipes:
        conn.close()  # the child sees end of file and exits
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    logger.debug("inference process %d ended (%s)", proc.pid, proc.returncode)


def _trim_heap() -> None:
    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to do
        return
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
