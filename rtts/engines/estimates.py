"""Running estimates of measured costs, shared by the scheduler and the engines."""

from __future__ import annotations

__all__ = ["fold"]

# Weight of each new measurement: recent enough to follow a host whose speed drifts,
# smooth enough that one slow run does not swing the next decision.
WEIGHT = 0.2


def fold(estimates: dict[str, float], kind: str, measured: float, weight: float = WEIGHT) -> None:
    """Move ``estimates[kind]`` towards a new measurement (exponentially weighted)."""
    estimates[kind] = (1 - weight) * estimates.get(kind, measured) + weight * measured
