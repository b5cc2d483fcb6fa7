"""ONNX Runtime in a child process: the server itself never imports it.

Once imported, onnxruntime cannot be unloaded: its library and the memory it keeps
for itself stay in the process after every model is dropped (92 MB idle instead of
50 MB, measured with benchmarks/latency.py). So every session lives in one child
process, started when the first model loads and ended when the last one is dropped
(an idle unload), which gives all of that memory back, with the Mandarin and
Japanese front ends' dictionaries, which live there too. It also contains a crash: a
model that kills the child fails one request, and the next one starts a new child
and loads the model again.

The parent side is ``Host`` and its ``RemoteSession``s, which look to an engine like
``onnxruntime.InferenceSession`` (``run`` and ``get_inputs``). Calls go over a pipe
as pickled tuples; a call is a few hundred microseconds, small beside a model run.
Only the inference thread makes calls (and a lock keeps any other caller in order).

The child is ``python -m rtts.engines.ort_host READ_FD WRITE_FD``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from rtts.engines.base import EngineError

__all__ = ["HOST", "Host", "RemoteSession"]

logger = logging.getLogger(__name__)


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
            return self._host.call("run", self._at[0], list(output_names) if output_names else None, feeds)


class Host:
    """The child process and the sessions in it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None  # to the child
        self._from: Connection | None = None  # from the child
        self._next_sid = 0
        self._live: set[int] = set()
        # Sessions garbage-collected since the last call. A finalizer can run in the
        # middle of a send on this very thread, so it only notes the id here.
        self._dropped: deque[list[int]] = deque()
        self.generation = 0  # bumped whenever a new child starts
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

    def open(self, model: Path | bytes, threads: int, name: str, cache_dir: Path | None) -> RemoteSession:
        """Load a model in the child (starting it if needed); EngineError when it cannot."""
        spec = (model, threads, name, cache_dir)
        with self.lock:
            sid, generation = self.reload(spec)
            inputs = self.call("inputs", sid)
        return RemoteSession(self, sid, generation, inputs, spec)

    def g2p(self, lang: str, text: str) -> str:
        """Mandarin or Japanese phonemes from the front end in the child (see
        ``g2p.kokoro_langs``), starting the child if needed."""
        with self.lock:
            self._ensure_child()
            return str(self.call("g2p", lang, text))

    def warm_up(self) -> None:
        """Have the child load the zh and ja front ends in the background."""
        with self.lock:
            self._ensure_child()
            self.call("warm")

    def reload(self, spec: tuple) -> tuple[int, int]:
        model, threads, name, cache_dir = spec
        with self.lock:
            self._ensure_child()
            self._next_sid += 1
            sid = self._next_sid
            self.call("load", sid, model if isinstance(model, bytes) else str(model), threads, name,
                      None if cache_dir is None else str(cache_dir))
            self._live.add(sid)
            return sid, self.generation

    def drop(self, at: list[int]) -> None:
        """A session was garbage-collected (its finalizer): free it at the next call."""
        self._dropped.append(at)

    def release(self) -> None:
        """End the child if no session is left in it: its memory goes back to the OS
        (the front ends' too: the next zh or ja request loads them again)."""
        with self.lock:
            self._flush_drops()
            if not self._live and self._proc is not None:
                self._stop()

    def _flush_drops(self) -> None:
        while self._dropped:
            sid, generation = self._dropped.popleft()
            if generation == self.generation and sid in self._live:
                self._live.discard(sid)
                if self.running:
                    self._send(("drop", sid))  # no answer: the child just forgets it

    def call(self, op: str, *args: Any) -> Any:
        with self.lock:
            if not self.running:
                self._lost("is not running")
            self._flush_drops()
            self._send((op, *args))
            try:
                assert self._from is not None
                status, value = self._from.recv()
            except (EOFError, OSError) as exc:
                self._lost(f"ended ({str(exc) or 'its pipe closed'})")
            if status == "err":
                raise EngineError(value)
            return value

    def _send(self, message: tuple) -> None:
        try:
            assert self._conn is not None
            self._conn.send(message)
        except (OSError, ValueError, AssertionError) as exc:
            self._lost(f"cannot be reached ({exc})")

    def _lost(self, why: str) -> NoReturn:
        code = None
        if self._proc is not None:
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
                [sys.executable, "-m", "rtts.engines.ort_host", str(to_child_r), str(from_child_w)],
                pass_fds=(to_child_r, from_child_w),
                stdin=subprocess.DEVNULL,
                cwd=Path(__file__).resolve().parents[2],  # so a checkout's rtts is found too
            )
        except OSError as exc:
            for fd in (to_child_r, to_child_w, from_child_r, from_child_w):
                os.close(fd)
            raise EngineError(f"cannot start the inference process: {exc}") from exc
        os.close(to_child_r)
        os.close(from_child_w)
        self._conn = Connection(to_child_w, readable=False)
        self._from = Connection(from_child_r, writable=False)
        self.generation += 1
        self.starts += 1
        self._live.clear()
        logger.debug("inference process %d started", self._proc.pid)

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        for conn in (self._conn, self._from):
            if conn is not None:
                conn.close()  # the child sees end of file and exits
        self._conn = self._from = None
        self._live.clear()
        if proc is not None:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            logger.debug("inference process %d ended (%s)", proc.pid, proc.returncode)


HOST = Host()


# ---------------------------------------------------------------- the child


def _serve(inbox: Connection, outbox: Connection) -> None:
    from rtts.engines import ort
    from rtts.g2p import kokoro_langs

    sessions: dict[int, Any] = {}
    while True:
        try:
            op, *args = inbox.recv()
        except (EOFError, OSError):
            return  # the parent closed the pipe or died
        try:
            if op == "load":
                sid, model, threads, name, cache_dir = args
                source = model if isinstance(model, bytes) else Path(model)
                sessions[sid] = ort.open_session(source, threads, name, None if cache_dir is None else Path(cache_dir))
                outbox.send(("ok", None))
            elif op == "inputs":
                outbox.send(("ok", [i.name for i in sessions[args[0]].get_inputs()]))
            elif op == "run":
                sid, names, feeds = args
                outbox.send(("ok", sessions[sid].run(names, feeds)))
            elif op == "g2p":
                outbox.send(("ok", kokoro_langs.local_phonemes(*args)))
            elif op == "warm":
                kokoro_langs.warm_up()
                outbox.send(("ok", None))
            elif op == "drop":
                sessions.pop(args[0], None)  # no answer: the parent does not wait
            else:
                outbox.send(("err", f"unknown request {op!r}"))
        except EngineError as exc:
            outbox.send(("err", str(exc)))
        except Exception as exc:  # ORT's own exception types; the child must go on
            outbox.send(("err", f"{type(exc).__name__}: {exc}"))


if __name__ == "__main__":
    # SIGTERM from systemd (sent to the whole unit) and SIGINT from a terminal (sent to
    # the whole process group) are for the server, which drains first and still needs
    # this process meanwhile; it ends when the server closes the pipe or exits.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
