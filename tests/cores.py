"""A core of its own for the tests that keep devices in step, while the other xdist worker
goes on beside them on the rest (tests/conftest.py).

Kiosk pages and headless players are timed to the ms by their output clocks; beside
another worker's load, on the same two cores, 5-6 of 24 kiosk runs failed, so they used to
run last and alone: ~280 s of a 2-core box with one core idle. Here the worker that runs
them takes the last CPU, and every other thread of the box is held to the others until the
module ends: not only the other worker's servers, browsers and engines but what they leave
to other parents (podman's conmon and the containers and build steps under it, a daemon
that forked away), which a walk down the other worker's process tree missed (a kiosk test
starved beside the container build). A thread already on this CPU alone is this worker's,
or something it started (affinity is inherited), and stays; a thread that may not move (a
kernel's per-CPU thread) is left as it is. A sweep every half second catches what was
started meanwhile, and every thread moved gets its own affinity back at the end.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_SWEEP_S = 0.5


def _user_threads() -> Iterator[int]:
    """Every thread of every process with a command line (kernel threads have none)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if not (proc / "cmdline").read_bytes():
                continue
            tids = [int(t.name) for t in (proc / "task").iterdir()]
        except OSError:  # it ended meanwhile
            continue
        yield from tids


def _move_off(mine: set[int], moved: dict[int, set[int]], first: bool) -> None:
    """Every thread off ``mine``; ``moved`` keeps what each had before the first sweep (a
    thread started later inherited the others from its parent: it gets ``mine`` back)."""
    for tid in _user_threads():
        try:
            had = os.sched_getaffinity(tid)
            if had == mine or not had - mine:
                continue  # this worker's own, or bound to this CPU by its owner
            moved.setdefault(tid, had if first else had | mine)
            if had & mine:
                os.sched_setaffinity(tid, had - mine)
        except OSError:  # gone, or may not move
            pass


@contextmanager
def own_core() -> Iterator[set[int] | None]:
    """This process on the last CPU it may use and everything else on the others, which it
    yields; each thread's affinity as it was after. Nothing to do (None) on one CPU or
    outside xdist."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or "PYTEST_XDIST_WORKER" not in os.environ:
        yield None
        return
    mine = {cpus[-1]}
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        os.sched_setaffinity(int(task.name), mine)
    moved: dict[int, set[int]] = {}
    stop = threading.Event()

    _move_off(mine, moved, first=True)

    def sweep() -> None:
        while not stop.wait(_SWEEP_S):
            _move_off(mine, moved, first=False)

    sweeper = threading.Thread(target=sweep, name="own-core", daemon=True)
    sweeper.start()
    try:
        yield set(cpus) - mine
    finally:
        stop.set()
        sweeper.join()
        for tid, had in moved.items():
            try:
                os.sched_setaffinity(tid, had)
            except OSError:
                pass
        for task in Path(f"/proc/{os.getpid()}/task").iterdir():
            os.sched_setaffinity(int(task.name), set(cpus))
