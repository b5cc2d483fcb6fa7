"""The suite's turns on the box (tests/box_turns.py): the in-step group waits for the loud
one and the loud one for it; the loud group's modules do not wait for each other."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.box_turns import IN_STEP, LOUD, Turns


def test_the_in_step_group_and_the_loud_one_take_turns(tmp_path: Path) -> None:
    path = tmp_path / "turns.lock"
    loud, other_loud, in_step = Turns(path), Turns(path), Turns(path)
    loud.enter(LOUD)
    other_loud.enter(LOUD)  # shared: a second holder is not kept waiting
    assert other_loud.waited_s < 0.1
    waiting = _enter(in_step, IN_STEP)
    assert not waiting.wait(0.3)  # both loud holders hold it
    loud.enter("tests/live/test_http.py")  # a module outside both groups: its worker lets go
    assert not waiting.wait(0.1)
    other_loud.leave()
    assert waiting.wait(5) and in_step.waited_s >= 0.3
    # And the other way round.
    waiting = _enter(loud, LOUD)
    assert not waiting.wait(0.3)
    in_step.enter(None)
    assert waiting.wait(5)
    loud.leave()


def test_a_module_outside_both_groups_holds_no_turn(tmp_path: Path) -> None:
    path = tmp_path / "turns.lock"
    turns = Turns(path)
    turns.enter("tests/unit/test_audio.py")
    in_step = Turns(path)
    in_step.enter(IN_STEP)
    assert in_step.waited_s < 0.1
    in_step.leave()


def _enter(turns: Turns, group: str) -> threading.Event:
    """``turns.enter(group)`` on a thread of its own; set once it has the turn."""
    done = threading.Event()
    threading.Thread(target=lambda: (turns.enter(group), done.set()), daemon=True).start()
    return done
