"""The small SSML subset kiosks need, turned into plain text before units are cut.

Understood tags:

* ``<break time="500ms"/>`` (or ``"1.5s"``, or ``strength="weak|medium|strong|x-strong"``):
  a pause, at most 10 s.
* ``<say-as interpret-as="characters">ABC123</say-as>`` (also ``spell-out``, ``digits``,
  ``telephone``): read character by character.
* ``<sub alias="World Wide Web">WWW</sub>``: read the alias instead.

Every other tag (``<speak>``, ``<p>``, ``<prosody>``, a misspelt one...) is ignored
and its content read, so markup never fails a request. Text that only looks like a
tag ("a < b", "<3") is read as text. ``&lt; &gt; &amp; &quot; &apos;`` are decoded.

A pause travels through unit splitting as a private-use sentinel (``BREAK``); the
session cuts units at it with :func:`pieces`.
"""

from __future__ import annotations

import itertools
import re
from typing import Final

from rtts.text.normalize_en import LETTERS
from rtts.text.origins import Origins, block

BREAK_OPEN: Final = "\ue000"
BREAK_CLOSE: Final = "\ue001"
MAX_BREAK_MS: Final = 10_000
# Private-use characters the sentinels use are removed from client text first.
_PRIVATE: Final = re.compile("[\ue000-\ue00f]")
# Every repeat here is possessive (``*+``, ``++``): text arrives from any client on the
# event loop, and adjacent repeats that may match the same characters ("\s*/?\s*")
# backtrack polynomially on a failed match ("<" + thousands of spaces took 46 s).
# Possessive repeats never give back what they took, so each match attempt is linear.
_TAG: Final = re.compile(
    r"<\s*+(?P<close>/)?\s*+(?P<name>[A-Za-z][\w:.-]*+)"
    r"(?P<attrs>(?:\s++[\w:.-]++\s*+=\s*+(?:\"[^\"<>]*+\"|'[^'<>]*+'))*+)\s*+(?P<empty>/)?\s*+>"
)
_ATTR: Final = re.compile(r"([\w:.-]++)\s*+=\s*+(?:\"([^\"]*+)\"|'([^']*+)')")
_TIME: Final = re.compile(r"\s*+(\d++(?:\.\d++)?)\s*+(ms|s)?\s*+$", re.IGNORECASE)
# The start of a tag still arriving: "<", maybe "/", then only characters a tag may hold.
_OPENING: Final = re.compile(r"<(?:\s*+/)?[\w:.\-\s=\"']*+$")
_STRENGTH_MS: Final = {"none": 0, "x-weak": 100, "weak": 200, "medium": 400, "strong": 700, "x-strong": 1200}
_SPELL: Final = frozenset({"characters", "spell-out", "digits", "telephone", "verbatim"})
_ENTITIES: Final = {"&lt;": "<", "&gt;": ">", "&amp;": "&", "&quot;": '"', "&apos;": "'"}
_ENTITY: Final = re.compile("|".join(_ENTITIES))
_SPLIT: Final = re.compile(f"{BREAK_OPEN}(\\d+){BREAK_CLOSE}")
_HOLD_MAX: Final = 2048  # an unfinished tag longer than this is read as text


def break_text(ms: int) -> str:
    return f"{BREAK_OPEN}{ms}{BREAK_CLOSE}"


def spell_out(text: str) -> str:
    """Character by character: letters by their English names, digits and CJK one at a time."""
    out = []
    for ch in text:
        if ch.isascii() and ch.upper() in LETTERS:
            out.append(LETTERS[ch.upper()])
        elif not ch.isspace():
            out.append(ch)
    return " ".join(out)


def _attrs(raw: str) -> dict[str, str]:
    return {m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3) for m in _ATTR.finditer(raw)}


def _break_ms(attrs: dict[str, str]) -> int:
    if "time" in attrs:
        m = _TIME.match(attrs["time"])
        if m is None:
            return _STRENGTH_MS["medium"]
        value = float(m.group(1)) * (1000 if (m.group(2) or "ms").lower() == "s" else 1)
        return int(min(MAX_BREAK_MS, value))
    return _STRENGTH_MS.get(attrs.get("strength", "medium").lower(), _STRENGTH_MS["medium"])


def render(text: str) -> str:
    """Markup → plain text with break sentinels (see the module docstring)."""
    text = _PRIVATE.sub("", text)
    if "<" not in text and "&" not in text:
        return text
    return render_mapped(text)[0]


def render_mapped(raw: str, base: int = 0) -> tuple[str, Origins]:
    """``render(raw)`` and where each of its characters came from in ``raw`` (offset by
    ``base``): the content of a ``<sub>`` or ``<say-as>`` for what was read for it, the tag
    for a break, the entity for its character."""
    text = _PRIVATE.sub("", raw)
    out: list[tuple[str, Origins]] = []
    stack: list[tuple[str, str | None, int]] = []  # (tag, action, index in out where its content starts)
    pos = 0
    for m in _TAG.finditer(text):
        out.append(_decoded(text, pos, m.start()))
        pos = m.end()
        name = m.group("name").lower()
        attrs = _attrs(m.group("attrs"))
        if m.group("close"):
            for i in range(len(stack) - 1, -1, -1):
                if stack[i][0] == name:
                    _, action, start = stack[i]
                    del stack[i:]
                    _apply(out, action, start, m.start())
                    break
            continue
        if name == "break":
            pause = f" {break_text(_break_ms(attrs))} "
            out.append((pause, block(len(pause), m.start(), m.end())))
            continue
        if m.group("empty"):
            continue
        action = None
        if name == "say-as" and attrs.get("interpret-as", "").lower() in _SPELL:
            action = "spell"
        elif name == "sub" and "alias" in attrs:
            action = "alias:" + attrs["alias"]
        stack.append((name, action, len(out)))
    out.append(_decoded(text, pos, len(text)))
    while stack:  # unclosed tags still apply to the rest of the text
        _, action, start = stack.pop()
        _apply(out, action, start, len(text))
    origins = Origins(
        tuple(itertools.chain.from_iterable(o.starts for _, o in out)),
        tuple(itertools.chain.from_iterable(o.ends for _, o in out)),
    )
    if len(text) < len(raw):  # private-use characters were dropped first
        kept = [i for i, ch in enumerate(raw) if not _PRIVATE.match(ch)]
        origins = origins.then(Origins(tuple(kept), tuple(i + 1 for i in kept)))
    return "".join(t for t, _ in out), origins.shifted(base)


def blank(text: str, fill: str = " ") -> str:
    """The text as a reader sees it, at the same offsets: every tag (and private-use
    character) replaced by as many ``fill``, every entity by its character then ``fill``.

    For what lines up the client's own text with something else by code point (word
    timing's ``text_start``/``text_end``, subtitles): the offsets of the client's text
    stay valid, and no tag's ``1.5s`` or ``"`` looks like punctuation.
    """
    text = _PRIVATE.sub(lambda m: fill * len(m.group(0)), text)
    text = _TAG.sub(lambda m: fill * len(m.group(0)), text)
    return _ENTITY.sub(lambda e: _ENTITIES[e.group(0)] + fill * (len(e.group(0)) - 1), text)


def _decoded(text: str, start: int, end: int) -> tuple[str, Origins]:
    """``text[start:end]`` with its entities decoded, and its origins."""
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    at = start
    for e in _ENTITY.finditer(text, start, end):
        chars.extend((text[at : e.start()], _ENTITIES[e.group(0)]))
        starts.extend((*range(at, e.start()), e.start()))
        ends.extend((*range(at + 1, e.start() + 1), e.end()))
        at = e.end()
    chars.append(text[at:end])
    starts.extend(range(at, end))
    ends.extend(range(at + 1, end + 1))
    return "".join(chars), Origins(tuple(starts), tuple(ends))


def _apply(out: list[tuple[str, Origins]], action: str | None, start: int, close: int) -> None:
    """A say-as or sub closed at ``close``: its content (``out[start:]``) replaced by what is read."""
    if action is None:
        return
    content = "".join(t for t, _ in out[start:])
    spans = [o.span(0, len(o)) for _, o in out[start:] if len(o)]
    first, last = (spans[0][0], spans[-1][1]) if spans else (close, close)
    del out[start:]
    said = spell_out(content) if action == "spell" else action.removeprefix("alias:")
    out.append((said, block(len(said), first, last)))


def pieces(unit_text: str) -> list[str | int]:
    """A unit's text split at breaks: text pieces (stripped, non-empty) and pause lengths in ms."""
    out: list[str | int] = []
    for i, part in enumerate(_SPLIT.split(unit_text)):
        if i % 2:
            out.append(int(part))
        elif part.strip():
            out.append(part.strip())
    return out


class MarkupStream:
    """``render`` for text arriving in pieces: holds back a tag (or a say-as/sub span) until it is complete."""

    def __init__(self) -> None:
        self._held = ""
        self._at = 0  # where the held text starts in all the text fed

    def feed(self, text: str) -> str:
        return render(self._take(text))

    def flush(self) -> str:
        return render(self._take(None))

    def feed_mapped(self, text: str) -> tuple[str, Origins]:
        """``feed``, with the origins of what it returns in all the text fed so far."""
        at = self._at
        return render_mapped(self._take(text), at)

    def flush_mapped(self) -> tuple[str, Origins]:
        at = self._at
        return render_mapped(self._take(None), at)

    def _take(self, text: str | None) -> str:
        """What can be rendered now (everything at the end: ``text`` None)."""
        whole = self._held + (text or "")
        cut = None if text is None else _unfinished(whole)
        if cut is None or len(whole) - cut > _HOLD_MAX:
            cut = len(whole)
        self._held = whole[cut:]
        self._at += cut
        return whole[:cut]


def _unfinished(text: str) -> int | None:
    """Where an unfinished tag, or an open say-as/sub span, starts; None if there is none."""
    lt = text.rfind("<")
    if lt >= 0 and _OPENING.match(text, lt):
        start: int | None = lt
    else:
        start = None
    for name in ("say-as", "sub"):
        opened = [m.start() for m in _TAG.finditer(text) if m.group("name").lower() == name and not m.group("close")]
        closed = [m.start() for m in _TAG.finditer(text) if m.group("name").lower() == name and m.group("close")]
        if len(opened) > len(closed):
            first_open = opened[len(closed)]
            start = first_open if start is None else min(start, first_open)
    return start
