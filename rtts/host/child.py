"""The inference process's serve loop: ``python -m rtts.host.child READ_FD WRITE_FD OPS``.

Each request is a tuple ``(op, *args)`` and gets one answer, ``("ok", value)`` or
``("err", text)``, except ``drop``, which the parent does not wait for. Sessions'
requests go to ``sessions.Sessions``; any other op is looked up in ``OPS`` (JSON: op →
``"module:function"`` or ``"module:Class.method"``, from the engines'
``EngineKind.host_ops``), imported on first use, so a child that only runs Piper never
imports Kokoro's dictionaries. A class is made once per child and keeps its state
(loaded front ends) for as long as the child lives.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from rtts.host.errors import EngineError
from rtts.host.sessions import Sessions


def serve(inbox: Connection, outbox: Connection, ops: dict[str, str]) -> None:
    sessions = Sessions()
    handlers: dict[str, Callable[..., Any]] = {"load": sessions.load, "inputs": sessions.inputs, "run": sessions.run}
    instances: dict[str, Any] = {}  # "module:Class" → the one object of it in this child
    while True:
        try:
            op, *args = inbox.recv()
        except (EOFError, OSError):
            return  # the parent closed the pipe or died
        if op == "drop":
            sessions.drop(*args)  # no answer: the parent does not wait
            continue
        try:
            handler = handlers.get(op)
            if handler is None:
                handler = handlers[op] = _resolve(ops, op, instances)
            outbox.send(("ok", handler(*args)))
        except EngineError as exc:
            outbox.send(("err", str(exc)))
        except Exception as exc:  # ORT's own exception types; the child must go on
            outbox.send(("err", f"{type(exc).__name__}: {exc}"))


def _resolve(ops: dict[str, str], op: str, instances: dict[str, Any]) -> Callable[..., Any]:
    target = ops.get(op)
    if target is None:
        raise EngineError(f"unknown request {op!r}")
    module, _, name = target.partition(":")
    owner, _, method = name.rpartition(".")
    if not owner:
        return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]
    key = f"{module}:{owner}"
    if key not in instances:
        instances[key] = getattr(importlib.import_module(module), owner)()
    return getattr(instances[key], method)  # type: ignore[no-any-return]


if __name__ == "__main__":
    # SIGTERM from systemd (sent to the whole unit) and SIGINT from a terminal (sent to
    # the whole process group) are for the server, which drains first and still needs
    # this process meanwhile; it ends when the server closes the pipe or exits.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Every child opens sessions, so ONNX Runtime is imported before the first request
    # rather than inside it: a spare child (``Host.prestart``) then has it ready. One that
    # cannot be imported is left to the first load, whose answer says why.
    with contextlib.suppress(ImportError):
        import onnxruntime  # noqa: F401

    serve(
        Connection(int(sys.argv[1]), writable=False),
        Connection(int(sys.argv[2]), readable=False),
        json.loads(sys.argv[3]) if len(sys.argv) > 3 else {},
    )
    # Nothing here needs an orderly teardown, and freeing the front ends' dictionaries
    # object by object (Hibari's lexicons: 106 MB) made the exit take 1.5 s instead of
    # 0.3 s on a busy box, which idle unload and shutdown wait for.
    sys.stderr.flush()
    os._exit(0)
