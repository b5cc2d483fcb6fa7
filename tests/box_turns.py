"""Whose turn the box is: the suite's loud group and its in-step group never run at once.

The loud group (``first_in_turn``: the container build, the soaks and the pages beside
them) loads the whole box by design; the in-step group (``in_step``: kiosks, sync.js and
headless players kept in step to the ms) holds its targets beside the live tests, not
beside that. tests/conftest.py orders the groups so that the in-step one comes up on one
worker about when the loud one ends on the other; should a box's proportions bring it up
sooner, its first test waits here. The loud group holds a shared lock from its first test
to its last, the in-step group an exclusive one, on a file of this run's (all workers
share it).
"""

from __future__ import annotations

import fcntl
import os
import time
import warnings
from pathlib import Path

import pytest

LOUD, IN_STEP = "first_in_turn", "in_step"
_MODES = {LOUD: fcntl.LOCK_SH, IN_STEP: fcntl.LOCK_EX}


class Turns:
    """One worker's hold on the box's turn: none, shared (loud) or exclusive (in step)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._mode: int | None = None
        self.waited_s = 0.0  # how long the last turn taken was waited for

    def enter(self, group: str | None) -> None:
        """Take the turn ``group``'s tests need (letting go of another first); nothing for
        a group that needs none."""
        mode = _MODES.get(group or "")
        if mode == self._mode:
            return
        self.leave()
        if mode is None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        t0 = time.monotonic()
        fcntl.flock(fd, mode)
        self.waited_s = time.monotonic() - t0
        self._fd, self._mode = fd, mode

    def leave(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing lets go of the lock
        self._fd = self._mode = None


def group_of(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return str(mark.args[0]) if mark is not None and mark.args else None


def lock_path(config: pytest.Config) -> Path:
    """A file in this run's temporary folder, which every worker of it shares (each has a
    folder of its own in it) and pytest removes with old runs."""
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    return (base.parent if hasattr(config, "workerinput") else base) / "box-turns.lock"


_TURNS = pytest.StashKey[Turns]()


# Before the item's fixtures are set up: the in-step group's module fixtures start servers.
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    turns = item.config.stash.get(_TURNS, None)
    if turns is None:
        turns = item.config.stash[_TURNS] = Turns(lock_path(item.config))
    group = group_of(item)
    turns.enter(group)
    if turns.waited_s > 5:
        # Not wrong, but a worker idle: the order in tests/conftest.py wants a new anchor.
        warnings.warn(f"{group} waited {turns.waited_s:.0f} s for its turn on the box", stacklevel=1)
        turns.waited_s = 0.0


def pytest_unconfigure(config: pytest.Config) -> None:
    turns = config.stash.get(_TURNS, None)
    if turns is not None:
        turns.leave()
