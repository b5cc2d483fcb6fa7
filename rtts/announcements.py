"""What a channel carries: an announcement, as published and as every instance receives it.

Pure data. A ``Draft`` is what a publisher asked for, checked by the publishing session
(its voice resolved to an id, so every instance and every subscriber speaks it the same
way); the bus gives it the channel's next sequence number and makes it an
``Announcement``, whose id is the same on every instance (``lobby#17``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Draft:
    channel: str
    text: str
    voice: str  # a voice id, never "the default": subscribers must all hear the same voice
    lang: str | None
    speed: float
    priority: str  # "normal" | "high"
    not_before: float | None  # Unix time

    def numbered(self, seq: int, published: float) -> Announcement:
        return Announcement(**asdict(self), seq=seq, published=published)

    def to_json(self, published: float) -> str:
        """What the bus carries, before it numbers it (``Announcement.from_json``)."""
        return json.dumps({**asdict(self), "published": published}, ensure_ascii=False)


@dataclass(frozen=True)
class Announcement(Draft):
    seq: int = 0  # the channel's sequence number, from the bus (1, 2, 3… per channel)
    published: float = 0.0  # Unix time the bus took it

    @property
    def id(self) -> str:
        return f"{self.channel}#{self.seq}"

    @property
    def high(self) -> bool:
        return self.priority == "high"

    @classmethod
    def from_json(cls, seq: int, text: str) -> Announcement:
        """A draft as the bus carried it (``Draft.to_json``), numbered ``seq``."""
        fields = json.loads(text)
        published = float(fields.pop("published", 0.0))
        return Draft(**fields).numbered(seq, published)
