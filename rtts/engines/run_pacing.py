"""How long an engine's next run may be, from what the inference thread can spare (issue 32).

An engine that makes a unit's audio in runs (Kokoro: one forward pass each, nothing heard
until it ends) blocks the one inference thread for a whole run. Every client on that
thread must still have audio when the run ends, so the thread tells the engine, before
each run, how many seconds of compute it may take (``Engine.limit_run_compute``: the
tightest slack among the clients, ``InferenceWorker``). The engine turns that into
phonemes with its measured cost per language (``RunCost``: a fixed part, ~0.1 s for a
Kokoro run, and a part per phoneme, learned as runs go, on this box) and cuts the run at a word boundary
(``paced_run``): a listener alone on a fast box gets the unit whole, as before; under
load the runs are as long as the others' buffers allow, and grow as buffers grow.
"""

from __future__ import annotations

import math
from collections.abc import Container
from dataclasses import dataclass, field

from rtts.g2p.split import BREAKS

__all__ = ["RunCost", "paced_run"]


@dataclass
class RunCost:
    """Compute seconds of a run: a fixed part plus a part per phoneme (at speed 1), per
    language, learned as runs go by exponentially weighted least squares (a box whose
    speed drifts is followed; one slow run does not swing it). Each language starts from
    the priors as if from ``prior_weight`` runs of ``shortest`` and ``4 × shortest``
    phonemes, so the first few measurements move it without making the line up alone.
    """

    overhead_s: float  # prior: the fixed part (predictor and session calls)
    per_token_s: float  # prior: the part per phoneme
    shortest: int
    weight: float = 0.2
    prior_weight: float = 2.0
    spread_weight: float = 0.1
    most_margin: float = 1.5
    _sums: dict[str, list[float]] = field(default_factory=dict)  # lang -> [w, wx, wy, wxx, wxy]
    _spread: dict[str, float] = field(default_factory=dict)  # lang -> mean square of log(measured / line)

    def line(self, lang: str) -> tuple[float, float]:
        """(fixed seconds, seconds per phoneme) for ``lang``."""
        sums = self._sums.get(lang)
        if sums is None:
            return self.overhead_s, self.per_token_s
        w, wx, wy, wxx, wxy = sums
        det = w * wxx - wx * wx
        if det <= 1e-9 or wx <= 0:
            return self.overhead_s, self.per_token_s
        slope = (w * wxy - wx * wy) / det
        fixed = (wy - slope * wx) / w
        # Noise on a narrow spread of lengths can tip the line: keep it through the mean.
        if slope <= 0:
            slope = self.per_token_s
            fixed = max(0.0, (wy - slope * wx) / w)
        elif fixed < 0:
            fixed, slope = 0.0, wy / wx
        return fixed, slope

    def fixed_s(self, lang: str) -> float:
        """A run's fixed part in ``lang``, for planning how often streams that share the
        thread pay it (``room.crowd_hold_s``): the line's, and no less than the priors'
        share of the runs' mean cost (the line through the mean with the priors' ratio
        of fixed to per phoneme). Where this box is faster than the priors, the line
        through their points and its first runs tips below zero and is drawn through
        the origin: on the 2-core Xeon an English run of 16 phonemes took 0.19 s and
        one of 51 0.49 s (0.08 s + 8 ms a phoneme), the line read 0 s fixed for the
        next 20 runs, and a fresh server let four streams in together that the crowd
        rule would have let in one after another."""
        fixed, _ = self.line(lang)
        sums = self._sums.get(lang)
        if sums is None:
            return fixed
        w, wx, wy = sums[:3]
        ratio = self.overhead_s / self.per_token_s  # phonemes' worth of the priors' fixed part
        return max(fixed, ratio * wy / (ratio * w + wx))

    def margin(self, lang: str) -> float:
        """How far over the line a run may cost: one plus twice the runs' recent spread
        around it (relative), at most ``most_margin``. On a 2-core EPYC a Mandarin run's
        cost wandered ±15 % around the line, and a run sized to the line's own figure
        left the listener a 0.03-0.07 s gap in about half the rounds; a box whose runs
        keep to the line keeps its runs long."""
        return min(self.most_margin, 1.0 + 2.0 * math.sqrt(self._spread.get(lang, 0.0)))

    def tokens_within(self, lang: str, seconds: float, speed: float) -> int:
        """The most phonemes a run may have to take at most ``seconds``, margin included
        (0 when none fit)."""
        fixed, slope = self.line(lang)
        return max(0, int((seconds / self.margin(lang) - fixed) * speed / slope))

    def learn(self, lang: str, tokens: int, speed: float, seconds: float) -> None:
        x = tokens / speed
        # The spread against the line as it stood (the priors' at first: a line still far
        # from this box's makes a wide margin, which narrows as the line is learned).
        fixed, slope = self.line(lang)
        predicted = fixed + slope * x
        if predicted > 0 and seconds > 0:
            error = math.log(seconds / predicted) ** 2
            self._spread[lang] = (1 - self.spread_weight) * self._spread.get(lang, 0.0) + self.spread_weight * error
        if lang not in self._sums:
            self._sums[lang] = [0.0] * 5
            for n in (self.shortest, 4 * self.shortest):
                self._add(lang, n, self.overhead_s + self.per_token_s * n, self.prior_weight / 2)
        sums = self._sums[lang]
        for i in range(5):
            sums[i] *= 1 - self.weight
        self._add(lang, x, seconds, self.weight * (self.prior_weight + 1))

    def _add(self, lang: str, x: float, y: float, w: float) -> None:
        sums = self._sums[lang]
        for i, v in enumerate((w, w * x, w * y, w * x * x, w * x * y)):
            sums[i] += v


def paced_run(
    phonemes: str, most: int, shortest: int, words: bool = True, joined: Container[int] = frozenset(),
    least: int | None = None,
) -> tuple[str, str]:
    """``phonemes`` as (this run, the rest): the longest run up to ``most`` symbols that
    ends at a word boundary (preferring one after punctuation; with ``words`` False, only
    after punctuation; never at a space in ``joined``, positions in ``phonemes`` stripped:
    inside one written word's reading), else the shortest such run of at least ``shortest``; the whole
    when it fits or has no place to cut. A cut leaves ``shortest`` on both sides (a cut
    costs the phrase its intonation: it must buy time), or half that where no cut can and
    the whole is over ``most``: a run of 52 English phonemes whose words ended at 21 and
    31 was made whole, 0.5 s past the audio in hand, where 31 | 20 fitted (a gap bought
    to spare a 1.1 s phrase its own run). With ``least`` (below ``shortest``), a run no
    cut could keep within ``most`` is cut shorter instead, leaving ``least`` on both
    sides, where a cut does: a shorter run in time rather than a longer one late."""
    text = phonemes.strip()
    limit = max(most, shortest)
    if len(text) <= limit:
        return text, ""

    def cuts_leaving(side: int) -> list[int]:
        return [
            i for i, ch in enumerate(text)
            if ch == " " and i not in joined and (words or text[i - 1] in BREAKS)
            and side <= i <= len(text) - side - 1
        ]  # fmt: skip

    cuts = cuts_leaving(shortest) or [i for i in cuts_leaving(shortest // 2) if i <= limit]
    fitting = [i for i in cuts if i <= limit]
    if least is not None and not any(i <= most for i in fitting):
        in_time = [i for i in cuts_leaving(least) if i <= max(most, least)]
        if in_time:
            cuts = fitting = in_time
    after_breaks = [i for i in fitting if text[i - 1] in BREAKS]
    cut = max(after_breaks or fitting) if fitting else min(cuts, default=None)
    if cut is None:
        return text, ""
    return text[:cut].rstrip(), text[cut:].lstrip()
