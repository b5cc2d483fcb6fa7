"""What a channel carries: an announcement, as published and as every instance receives it.

Pure data. A ``Draft`` is what a publisher asked for, checked by the publishing session
(its voice resolved to an id, so every instance and every subscriber speaks it the same
way); the bus gives it the channel's next sequence number and makes it an
``Announcement``, whose id is the same on every instance (``lobby#17``).

What comes back from a shared bus (Redis) is untrusted: anyone who can ``PUBLISH``
there can send anything. ``decode`` checks it with the WebSocket's own ``publish``
checks (``protocol.check``) before any instance acts on it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from rtts import protocol
from rtts.protocol import ErrorCode, ProtocolError

# The fields a bus message carries (``Draft.to_json``), each required; and those it may
# carry (absent when unset, so that an instance of an earlier version still reads it).
_WIRE_FIELDS = ("channel", "text", "voice", "lang", "speed", "priority", "not_before", "published")
_OPTIONAL_WIRE_FIELDS = ("wanted_at", "generator")
_MAX_SEQ_DIGITS = 18  # below 2**63: what Redis INCR can count to


@dataclass(frozen=True)
class Draft:
    channel: str
    text: str
    voice: str  # a voice id, never "the default": subscribers must all hear the same voice
    lang: str | None
    speed: float
    priority: str  # "normal" | "high"
    not_before: float | None  # Unix time
    # ``publish.play_at``: when the publisher wants it heard (Unix s on the shared clock).
    wanted_at: float | None = None
    generator: str | None = None  # ``publish.generator``; None: each instance's own

    def numbered(self, seq: int, published: float) -> Announcement:
        return Announcement(**asdict(self), seq=seq, published=published)

    def to_json(self, published: float) -> str:
        """What the bus carries, before it numbers it (``announcements.decode``)."""
        fields = {k: v for k, v in asdict(self).items() if k not in _OPTIONAL_WIRE_FIELDS or v is not None}
        return json.dumps({**fields, "published": published}, ensure_ascii=False)


@dataclass(frozen=True)
class Announcement(Draft):
    seq: int = 0  # the channel's sequence number, from the bus (1, 2, 3… per channel)
    published: float = 0.0  # Unix time the bus took it
    # When its first sample is heard (Unix s on the shared clock), once the channel has
    # chosen it (``channels.py``); never on the bus: each instance learns it by its claim.
    play_at: float | None = None
    # When it reached this instance (shared clock): no instance began it much before, so
    # no claim of its play_at is earlier (``timeline.claim_bounds``). Never on the bus.
    arrived: float = 0.0

    @property
    def id(self) -> str:
        return f"{self.channel}#{self.seq}"

    @property
    def high(self) -> bool:
        return self.priority == "high"


def decode(data: bytes, *, now: float, max_text_chars: int) -> Announcement:
    """A bus message, ``b"<seq>\\n<Draft.to_json>"``, as an announcement; ``ProtocolError``
    (``bad_message``, ``text_too_long``) for anything a publishing session would not have sent."""

    def bad(why: str) -> ProtocolError:
        return ProtocolError(ErrorCode.BAD_MESSAGE, why)

    head, sep, body = data.partition(b"\n")
    if not sep or not head.isdigit() or len(head) > _MAX_SEQ_DIGITS or int(head) < 1:
        raise bad("no sequence number")
    # The JSON parser of every other edge (UTF-8 only, no NaN, bounded nesting); each
    # character of text is at most 6 bytes of JSON ("\\u0001"), the rest is small.
    try:
        fields = protocol.decode_json(body, max_bytes=6 * max_text_chars + 4096)
    except ProtocolError as exc:  # bad_frame there; a bus message is one message
        raise bad(exc.message) from None
    if set(fields) - set(_OPTIONAL_WIRE_FIELDS) != set(_WIRE_FIELDS):
        raise bad(f"a JSON object with exactly {', '.join(_WIRE_FIELDS)} (and maybe {', '.join(_OPTIONAL_WIRE_FIELDS)})")
    voice, speed, published = fields["voice"], fields["speed"], fields["published"]
    if not isinstance(voice, str) or isinstance(speed, bool) or not isinstance(speed, (int, float)):
        raise bad("voice must be a voice id, speed a number")
    if isinstance(published, bool) or not isinstance(published, (int, float)) or not protocol.finite(published):
        raise bad("published must be a Unix time")
    # The same checks as a WebSocket client's ``publish``: types, channel name, priority,
    # speed, Unicode, not_before (voice and language were resolved by the publisher).
    msg = protocol.Publish(
        channel=fields["channel"], text=fields["text"], voice=voice, lang=fields["lang"],
        speed=speed, priority=fields["priority"], not_before=fields["not_before"], play_at=fields.get("wanted_at"),
        generator=fields.get("generator"),
    )
    protocol.check(msg)
    protocol.check_not_before(msg.not_before, now)
    protocol.check_not_before(msg.play_at, now, "wanted_at")
    if not msg.text.strip():
        raise bad("text has nothing to speak")
    if len(msg.text) > max_text_chars:
        raise ProtocolError(ErrorCode.TEXT_TOO_LONG, f"text is over {max_text_chars} characters")
    not_before = float(msg.not_before) if msg.not_before is not None else None
    wanted_at = float(msg.play_at) if msg.play_at is not None else None
    draft = Draft(msg.channel, msg.text, voice, msg.lang, float(speed), msg.priority, not_before, wanted_at, msg.generator)
    return draft.numbered(int(head), float(published))
