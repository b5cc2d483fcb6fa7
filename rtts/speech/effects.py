"""What a session asks its driver to do (``serve/connection.py`` carries each out): the
session itself does no I/O, so these are its only way to act."""

from __future__ import annotations

from dataclasses import dataclass

from rtts import protocol
from rtts.broadcast.announcements import Draft
from rtts.synthesis.jobs import Job

__all__ = ["Close", "Drop", "Effect", "Join", "Leave", "Post", "Send", "Submit"]


@dataclass(frozen=True)
class Send:
    message: protocol.ServerMessage


@dataclass(frozen=True)
class Submit:
    job: Job


@dataclass(frozen=True)
class Drop:
    job: Job


@dataclass(frozen=True)
class Close:
    code: int
    reason: str


@dataclass(frozen=True)
class Join:
    """Subscribe this connection to a channel (``channels.Channels.join``)."""

    channel: str
    after: int | None
    ahead_s: float = 0.0  # ``subscribe.ahead_ms``: how long before play_at it needs the audio


@dataclass(frozen=True)
class Leave:
    channel: str


@dataclass(frozen=True)
class Post:
    """Publish an announcement, checked and with its voice resolved."""

    draft: Draft


Effect = Send | Submit | Drop | Close | Join | Leave | Post
