"""The memory budget: how much the whole service (server and inference process) may
hold, and what the inference thread lets go of to stay under it.

A small box runs rtts under a memory cap (a container's ``--memory``, systemd's
``MemoryMax``); past the cap the kernel kills a process, and the one it picks is the
inference process, the largest. So the budget defaults to the cap of the cgroup the
service runs in, less headroom, and before the inference thread loads a part (a model,
a language's front end) or runs a unit it checks the anonymous memory it measures,
plus what it is about to add, against the budget.

What it can do about it, cheapest first:

* bound the run: an engine that can cut a unit into shorter runs (Kokoro: a run's
  activations grow with its length, ~1 MB per phoneme) is told how much a run may add;
* end the inference process and start again with only what the job needs: front ends
  hold their dictionaries in Python objects, which a process does not give back when
  they are dropped (the zh front end's 126 MB stayed after ``del``), so ending the
  process is the one way to have that memory back. Parts reload in a fraction of a
  second (docs/history/benchmarks.md, "Memory (issue 22)");
* refuse the job (``memory_budget``) when even alone it does not fit.

This module decides (the cap itself is read by ``cgroup.py``); ``inference.py`` measures
the inference process and acts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

MB = 1024 * 1024
# The smallest budget rtts works in (``--memory-budget``'s floor): the server, a bare
# inference process and one Piper voice.
MIN_BUDGET = 64 * MB
# The budget counts anonymous memory (heap, arenas, Python objects: what the kernel can
# only get back by killing a process; there is no swap on these boxes). File-backed
# pages (onnxruntime's and Python's libraries, memory-mapped tables and dictionaries,
# ~80 MB of the two processes' RSS) and page cache are charged to the same cgroup but
# can be dropped and read again, as can socket buffers' worth of slack: the budget
# leaves them a fifth of the cap, and at least this much.
MIN_HEADROOM = 64 * MB
# A restart costs the reload of the job's parts; it is worth it only if it gives back
# more than this (what is resident beyond the job's parts: other parts, or what runs
# left behind).
RESTART_GAIN_MB = 16.0


def own_rss() -> int:
    """This process's resident memory in bytes (Linux; 0 where /proc has no answer)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def anonymous_bytes(pid: int | str = "self") -> int:
    """A process's resident anonymous and shared-memory pages in bytes (``RssAnon`` +
    ``RssShmem``): what the budget counts. 0 where /proc has no answer."""
    total = 0
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssShmem:")):
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return total


def budget_for(limit: int | None) -> int | None:
    """The budget under a cgroup limit: the limit less its headroom, and at least
    ``MIN_BUDGET``. Under a cap too small for both (under 128 MB) the budget is that floor,
    with a warning: the least rtts can hold, rather than none at all, or a budget
    ``--memory-budget`` would refuse though nobody gave it."""
    if limit is None:
        return None
    budget = limit - max(MIN_HEADROOM, limit // 5)
    if budget < MIN_BUDGET:
        log.warning("the cgroup's memory cap (%.0f MB) is below what rtts needs (%.0f MB: a %.0f MB budget and "
                    "%.0f MB of headroom): the budget is %.0f MB, and the kernel may end the inference process "
                    "before the budget can act; raise the cap", limit / MB, (MIN_BUDGET + MIN_HEADROOM) / MB,
                    MIN_BUDGET / MB, MIN_HEADROOM / MB, MIN_BUDGET / MB)
        return MIN_BUDGET
    return budget


@dataclass(frozen=True)
class Plan:
    """What to do before a job (or a load) runs."""

    fits: bool
    restart: bool = False  # end the inference process first: only the job's parts load again
    run_mb: float | None = None  # bound on what one run may add (None: the engine's own longest run fits)


def plan(
    budget_mb: float,
    used_mb: float,
    resident: Mapping[str, float],
    needed: Mapping[str, float],
    run_mb: float,
    min_run_mb: float,
    fresh_mb: float,
) -> Plan:
    """Decide how ``needed`` parts (name → MB) and one run of ``run_mb`` (or, bounded, at
    least ``min_run_mb``) fit in ``budget_mb``.

    ``used_mb`` is what the service holds now (measured), with ``resident`` parts loaded
    in the inference process; ``fresh_mb`` is what it would hold right after a restart,
    before any part loads (the server and a bare inference process).
    """
    missing = sum(mb for name, mb in needed.items() if name not in resident)
    room = budget_mb - used_mb - missing
    if room >= run_mb:
        return Plan(True)
    fresh = budget_mb - fresh_mb - sum(needed.values())
    if fresh < min_run_mb:
        # Even alone in a new inference process: refused, whatever is loaded now, so an
        # utterance is refused at its start and not after its first units.
        return Plan(False)
    if room >= min_run_mb:
        return Plan(True, run_mb=room)  # a shorter run is cheaper than a restart
    if fresh > room + RESTART_GAIN_MB:
        return Plan(True, restart=True, run_mb=None if fresh >= run_mb else fresh)
    # What a restart would give back is within the headroom's margin: run as short as it goes.
    return Plan(True, run_mb=min_run_mb)


class WholeBodies:
    """Whole response bodies the server holds for its clients (``/dev/captioned_speech``
    with ``stream: false``: the JSON must be complete before its status goes out, so the
    audio waits in the server until the synthesis ends).

    Each is reserved at its estimated size before its synthesis starts, all of them
    together within ``limit`` bytes, so a refusal comes before any audio is made; as it
    fills, what it holds is counted here. The budget is for the inference runs: it
    counts the server at its own memory (``server_own``: the bodies left out), so a
    body never makes a voice "not fit even alone", and it counts what the bodies are
    still about to take (``pending``) as taken, so runs are shortened or the inference
    process restarted before the room is gone, not after. Event loop only; the
    inference thread reads the two totals (plain ints).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.reserved = 0
        self.held = 0

    def reserve(self, size: int) -> WholeBody | None:
        """A reservation of ``size`` bytes, or None while the others leave no room for it."""
        if self.reserved + size > self.limit:
            return None
        self.reserved += size
        return WholeBody(self, size)

    def pending(self) -> int:
        """Bytes reserved and not yet filled: what admitted bodies are about to take."""
        return max(0, self.reserved - self.held)

    def server_own(self, measured: int) -> int:
        """The server's anonymous memory ``measured`` less what the bodies hold."""
        return max(0, measured - self.held)


class WholeBody:
    """One body's reservation: ``fill`` as its bytes come, ``release`` once it is sent
    (or refused, or its client gone); released twice, nothing."""

    def __init__(self, ledger: WholeBodies, size: int) -> None:
        self._ledger = ledger
        self.size = size
        self.filled = 0
        self._released = False

    def fill(self, n: int) -> None:
        if not self._released:
            self.filled += n
            self._ledger.held += n

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._ledger.reserved -= self.size
            self._ledger.held -= self.filled
