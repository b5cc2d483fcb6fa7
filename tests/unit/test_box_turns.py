"""tests/box_turns.py with real locks between two processes, as the suite's two workers."""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid

from tests.box_turns import BoxTurns


def _shared_tests(run_id: str, count: int, events: mp.Queue) -> None:  # type: ignore[type-arg]
    turns = BoxTurns(run_id)
    for _ in range(count):
        with turns.shared():
            events.put(("shared in", time.monotonic()))
            time.sleep(0.02)
            events.put(("shared out", time.monotonic()))
    turns.close()


def test_a_worker_alone_waits_for_the_test_in_flight_and_holds_back_the_next() -> None:
    run_id = uuid.uuid4().hex
    alone = BoxTurns(run_id)
    events: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    other = mp.get_context("fork").Process(target=_shared_tests, args=(run_id, 60, events))
    other.start()
    try:
        assert events.get(timeout=10)[0] == "shared in"  # the other worker's stream of short tests
        alone.take_alone()  # not starved by it
        took = time.monotonic()
        time.sleep(0.3)
        gave = time.monotonic()  # before: a test let in by give_back may stamp its start first
        alone.give_back()
        other.join(30)
        seen = []
        while not events.empty():
            seen.append(events.get())
        inside = [t for what, t in seen if what == "shared in" and took <= t <= gave]
        assert not inside, "a test of the other worker ran while one had the box alone"
        assert any(what == "shared in" and t > gave for what, t in seen)  # and it went on after
    finally:
        other.kill()
        alone.close()
