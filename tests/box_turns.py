"""Turns on the box between the suite's two workers: a module that keeps devices in step to
the millisecond runs with the other worker's tests held back, the others share the box.

tests/conftest.py orders the in-step modules last so that the other worker has little left
beside them, but "little" was whatever xdist's schedule left there: two unit tests more
(1,791 to 1,793) and the two-instance kiosks' first samples were 10.3 ms apart in CI, a
kiosk's announcement came 41 ms late, and each passed alone. Now the worker that runs them
takes the box alone: it waits for the other's test in flight to end, and the other waits at
its next test until the in-step modules are done (its module's server, if any, stays up and
idle). What is left beside them is a few unit modules, so the suite takes seconds longer.

A reader-writer lock across processes by ``flock``, with a door in front so that a worker
waiting to be alone is not starved by the other's stream of short tests: whoever wants the
box alone holds the door while it waits, and every test passes the door before it takes
its share.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class BoxTurns:
    """One worker's side of the lock; ``run_id`` names the run (xdist's ``testrunuid``),
    so that two suites on one machine keep their own."""

    def __init__(self, run_id: str) -> None:
        self.folder = Path(tempfile.gettempdir()) / f"rtts-suite-{run_id}"
        self.folder.mkdir(exist_ok=True)
        self._box = os.open(self.folder / "box", os.O_RDWR | os.O_CREAT, 0o600)
        self._door = os.open(self.folder / "door", os.O_RDWR | os.O_CREAT, 0o600)
        self.alone = False

    def take_alone(self) -> None:
        """Have the box alone from now on (until ``give_back``): the other worker's test in
        flight ends first, its next one waits."""
        if self.alone:
            return
        fcntl.flock(self._door, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._box, fcntl.LOCK_EX)
        finally:
            fcntl.flock(self._door, fcntl.LOCK_UN)
        self.alone = True

    def give_back(self) -> None:
        if self.alone:
            fcntl.flock(self._box, fcntl.LOCK_UN)
            self.alone = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        """One test beside the other worker's, unless that one has the box alone."""
        self.give_back()
        fcntl.flock(self._door, fcntl.LOCK_EX)  # behind a worker waiting to be alone
        fcntl.flock(self._door, fcntl.LOCK_UN)
        fcntl.flock(self._box, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(self._box, fcntl.LOCK_UN)

    def close(self) -> None:
        """Ends this worker's side; the folder goes with the first to end (the other's
        descriptors keep the same two files, and each opened them at its start)."""
        self.give_back()
        os.close(self._box)
        os.close(self._door)
        shutil.rmtree(self.folder, ignore_errors=True)
