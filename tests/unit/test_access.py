"""Who gets in, as rules: the token in the handshake, Origin, X-Forwarded-For (the live
side is tests/live/test_access.py)."""

from __future__ import annotations

import pytest

from rtts import tokens
from rtts.serve import access

TOKEN = "kiosk-7 s3cret/+="  # spaces and base64 specials: must survive the subprotocol encoding


# ---------------------------------------------------------------- pure rules


def test_token_subprotocol_round_trips_and_compares():
    proto = tokens.encode_token(TOKEN)
    assert proto.startswith("rtts.auth.") and "=" not in proto and " " not in proto
    assert tokens.subprotocol_token(["rtts.v1", proto]) == (True, TOKEN)
    assert tokens.subprotocol_token(["rtts.v1"]) == (False, None)
    assert tokens.subprotocol_token(["rtts.auth.%%%"]) == (True, None)
    assert tokens.token_ok(TOKEN, TOKEN) and not tokens.token_ok(None, TOKEN)
    assert not tokens.token_ok(TOKEN + "x", TOKEN)
    assert access.select_subprotocol(["rtts.v1", proto]) == "rtts.v1"
    assert access.select_subprotocol([proto]) is None


@pytest.mark.parametrize(
    ("origin", "host", "allowed", "ok"),
    [
        (None, "box:8765", (), True),  # not a browser
        ("http://box:8765", "box:8765", (), True),  # the page rtts served itself
        # A localhost page is on the same machine as rtts only when rtts was reached as localhost.
        ("http://localhost:3000", "localhost:8765", (), True),
        ("http://127.0.0.1:5173", "127.0.0.1:8765", (), True),
        ("http://[::1]:8080", "[::1]:8765", (), True),
        ("http://localhost:3000", "127.0.0.1:8765", (), True),
        ("http://localhost:3000", "box:8765", (), False),  # some page on the visitor's own machine
        ("http://127.0.0.1:5173", "192.168.1.20:8765", (), False),
        ("https://evil.example", "box:8765", (), False),
        ("http://box:9999", "box:8765", (), False),
        ("null", "box:8765", (), False),
        ("https://kiosk.example", "box:8765", ("https://kiosk.example",), True),
        ("http://localhost:3000", "box:8765", ("https://kiosk.example",), False),
        ("https://anything.example", "box:8765", ("*",), True),
    ],
)
def test_origin_rules(origin, host, allowed, ok):
    assert access.origin_allowed(origin, host, allowed) is ok


@pytest.mark.parametrize(
    ("fetch_site", "allowed", "ok"),
    [
        (None, (), True),  # curl, scripts, kiosk apps
        ("none", (), True),  # the address typed into the browser's bar
        ("same-origin", (), True),  # the page rtts served
        ("cross-site", (), False),  # <audio src="http://LAN-IP:8765/tts?..."> on any web page
        ("same-site", (), False),  # another port or subdomain: still another origin
        ("Cross-Site", ("https://kiosk.example",), False),  # the page's origin is unknown: a list cannot allow it
        ("cross-site", ("*",), True),
    ],
)
def test_a_no_cors_request_from_another_site_is_refused(fetch_site, allowed, ok):
    """A browser's no-cors GET carries no Origin; Sec-Fetch-Site says another page made it."""
    assert access.origin_allowed(None, "192.168.1.20:8765", allowed, fetch_site) is ok


def test_forwarded_for_is_believed_only_from_trusted_proxies():
    trusted = ("10.0.0.0/8",)
    assert access.client_address("203.0.113.9", "1.2.3.4", trusted) == "203.0.113.9"
    assert access.client_address("10.0.0.2", "198.51.100.7", trusted) == "198.51.100.7"
    # A client cannot pick its address by sending its own X-Forwarded-For through the proxy.
    assert access.client_address("10.0.0.2", "6.6.6.6, 198.51.100.7", trusted) == "198.51.100.7"
    assert access.client_address("10.0.0.2", None, trusted) == "10.0.0.2"


def test_host_allow_list_against_dns_rebinding():
    from rtts.serve.access import host_allowed

    own = frozenset({"localhost", "kiosk", "kiosk.local"})
    for host in ("127.0.0.1:8765", "[::1]:8765", "192.168.1.20", "localhost:8765", "kiosk.local:8765", "a.localhost"):
        assert host_allowed(host, True, (), own), host
    for host in ("evil.example:8765", "rebind.attacker.test", None, "kiosk.evil.example"):
        assert not host_allowed(host, True, (), own), host
    assert host_allowed("evil.example:8765", False, (), own)  # curl, scripts: no rebinding
    assert host_allowed("tts.example.org", True, ("tts.example.org",), own)
    assert host_allowed("anything", True, ("*",), own)


async def test_the_waiting_room_is_bounded_oldest_out_and_timed():
    import asyncio

    room = access.Waiting(2)
    dropped: list[tuple[str, bool]] = []

    def enter(key: str, timeout: float = 10.0) -> None:
        room.enter(key, timeout, lambda late: dropped.append((key, late)))

    enter("a"), enter("b"), enter("c")  # a newcomer beyond the limit drops the oldest
    assert dropped == [("a", False)] and len(room) == 2 and room.evicted == 1
    room.leave("b")  # served: out of the room, never dropped
    enter("c", 0.05)  # entering again starts its wait anew (a Wyoming connection between requests)
    await asyncio.sleep(0.2)
    assert dropped == [("a", False), ("c", True)] and room.late == 1 and len(room) == 0
    enter("d"), enter("e")
    room.drop_all()
    assert dropped[-2:] == [("d", False), ("e", False)] and len(room) == 0
