"""Every text step that runs on the event loop takes time linear in its input (issue 13).

One message's text goes through markup, unit splitting and language segmentation on the
event loop, where any super-linear step stalls every client (a cubic regex froze the
server for 46 s). For each class of hostile input, the worst of each pattern family, the
steps run on 2,000 and on 64,000 characters: linear work grows 32x, quadratic 1,024x,
cubic 32,768x. The bound, 400x, leaves room for caches (measured: 40-160x) and none for
a quadratic step. Time is the process's CPU time, not the wall clock: on a loaded
machine a long run shares the cores with everyone while a short one often runs in one
slice, which made wall-clock ratios of linear steps reach 2,000x at load average 20.
No absolute time is asserted.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from rtts.text import markup
from rtts.text.segment import segment
from rtts.text.split import split_units

SMALL, LARGE, BOUND = 2_000, 64_000, 400

# Pattern classes: repeats that may match the same characters, runs a pattern rescans,
# and strings that grow piece by piece.
CLASSES: dict[str, Callable[[int], str]] = {
    "'<' then spaces (nested repeats)": lambda n: "<" + " " * (n - 2) + "!",
    "'</' then spaces": lambda n: "</" + " " * (n - 3) + "!",
    "a tag's attributes, never closed": lambda n: "<a" + ' x="1"' * (n // 6),
    "'<' everywhere": lambda n: "<" * n,
    "'<' and a letter": lambda n: "<a" * (n // 2),
    "entities": lambda n: "&lt" * (n // 3),
    "breaks": lambda n: "<break time='1ms'/>" * (n // 19),
    "a say-as span": lambda n: '<say-as interpret-as="characters">' + "A" * (n - 40),
    "a break time of spaces": lambda n: '<break time="1' + " " * (n - 20) + 'x"/>',
    "dots": lambda n: "." * n,
    "dotted abbreviations": lambda n: "a." * (n // 2),
    "digits": lambda n: "1" * n,
    "newlines": lambda n: "\n" * n,
    "scripts alternating": lambda n: "a漢" * (n // 2),
    "romaji in a Japanese sentence": lambda n: "次は " + "Shibuya " * (n // 8),
    "words": lambda n: "word " * (n // 5),
}


def _feed(text: str) -> None:
    stream = markup.MarkupStream()
    stream.feed(text)
    stream.flush()


STEPS: dict[str, Callable[[str], object]] = {
    "markup.render": markup.render,
    "MarkupStream.feed": _feed,
    "split_units": split_units,
    "segment": segment,
}


def _seconds(step: Callable[[str], object], text: str, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.process_time()
        step(text)
        best = min(best, time.process_time() - t0)
    return best


@pytest.mark.parametrize("kind", list(CLASSES))
@pytest.mark.parametrize("step", list(STEPS))
def test_text_steps_are_linear(step: str, kind: str) -> None:
    make, run = CLASSES[kind], STEPS[step]
    small = _seconds(run, make(SMALL), runs=3)
    large = _seconds(run, make(LARGE), runs=3)
    assert large < BOUND * max(small, 2e-5), f"{step} on {kind}: {small * 1e3:.2f} ms -> {large * 1e3:.1f} ms"
