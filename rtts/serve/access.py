"""Who may open a WebSocket, decided from the HTTP request before the upgrade.

Three checks, cheapest first, each with its own HTTP status so a client (or a load
balancer) can tell them apart: a browser ``Origin`` outside the allow-list gets 403,
a wrong token offered in ``Sec-WebSocket-Protocol`` gets 401, and a connection over
the caps gets 429 (this client address has too many) or 503 (the server is full or
draining). A token may also come later, in ``hello``; the session checks that one.

The token rides in the subprotocol list (``tokens.py``); the server only ever echoes
``rtts.v1``, never the token.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from urllib.parse import urlsplit

SUBPROTOCOL = "rtts.v1"
def offered_subprotocols(header_values: list[str]) -> list[str]:
    return [p.strip() for value in header_values for p in value.split(",") if p.strip()]


def select_subprotocol(offered: Iterable[str]) -> str | None:
    """Echo ``rtts.v1`` when offered; never anything else (in particular not the token)."""
    return SUBPROTOCOL if SUBPROTOCOL in offered else None


_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}
# Sec-Fetch-Site values that mean "a page of another origin made this request".
_FOREIGN_FETCH = {"cross-site", "same-site"}


def origin_allowed(
    origin: str | None, host: str | None, allowed: tuple[str, ...], fetch_site: str | None = None
) -> bool:
    """Whether a browser page at ``origin`` may connect.

    No ``Origin`` header means no browser (curl, a script, a kiosk app), with one
    exception: a browser's no-cors GET (``<audio src=http://box:8765/tts?text=…>`` on any
    page) carries no ``Origin`` but says ``Sec-Fetch-Site: cross-site`` (or
    ``same-site``); that page's origin is unknown, so only ``*`` allows it. Other
    requests without ``Origin`` are allowed, since the Origin check only protects
    against other web pages; the token is what keeps strangers out.

    With no allow-list, the page's own origin (the one that served ``/``, whose host is
    this request's ``Host``) is allowed, and a localhost page only when the server was
    reached by a localhost name too: then the page and rtts are on one machine (a
    development server beside rtts). A localhost page talking to a box on the LAN is
    some page on the visitor's own machine, which the box has no reason to trust.
    """
    if "*" in allowed:
        return True
    if origin is None:
        return fetch_site is None or fetch_site.strip().lower() not in _FOREIGN_FETCH
    if allowed:
        return origin.rstrip("/").lower() in {a.rstrip("/").lower() for a in allowed}
    try:
        parts = urlsplit(origin)
        origin_host = parts.hostname
        netloc = parts.netloc.lower()
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or origin_host is None:
        return False
    if origin_host in _LOCAL_HOSTS:
        return host is not None and _host_name(host) in _LOCAL_HOSTS
    return host is not None and netloc == host.lower()


def _host_name(host: str) -> str:
    """The name in a ``Host`` header, without port or IPv6 brackets, in lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def own_host_names() -> frozenset[str]:
    """The names this machine answers to without configuration: localhost and its host name."""
    name = socket.gethostname().lower()
    return frozenset({"localhost", name, name.split(".")[0], f"{name.split('.')[0]}.local"})


def host_allowed(host: str | None, browser: bool, allowed: tuple[str, ...], own: frozenset[str]) -> bool:
    """Whether a request naming ``host`` may be served (against DNS rebinding).

    A page on a rebinding domain reaches this server as its own origin, so the
    same-origin rule passes; only the name it used gives it away. Browser requests (with
    ``Origin`` or ``Sec-Fetch-Site``) must name an IP address, localhost, this machine's
    host name, a host of ``--allow-origin`` or one of ``allowed`` (``--allow-host``; ``*``
    any). Other clients (curl, scripts, kiosk apps) cannot be rebound and pass.
    """
    if not browser or "*" in allowed:
        return True
    if host is None:
        return False
    name = _host_name(host)
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    if name in own or name.endswith(".localhost"):
        return True
    return name in {_host_name(a) for a in allowed}


def client_address(peer: str, forwarded_for: str | None, trusted: tuple[str, ...]) -> str:
    """The client's address: the peer's, or the last untrusted hop of X-Forwarded-For when
    the peer is a trusted proxy (anything before that hop could be made up by the client)."""
    if forwarded_for is None or not _is_trusted(peer, trusted):
        return peer
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _is_trusted(hop, trusted):
            return hop
    return hops[0] if hops else peer


def _is_trusted(address: str, trusted: tuple[str, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    for entry in trusted:
        try:
            if ip in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


class ConnectionCaps:
    """Open WebSocket connections, in total and per client address.

    A slot is taken when a request is admitted (before the upgrade) and given back
    when that connection's task ends, so handshakes in flight count too and no burst
    of simultaneous requests can overshoot the caps.
    """

    def __init__(self, total: int, per_address: int) -> None:
        self.total_cap = total
        self.per_address_cap = per_address
        self.total = 0
        self.by_address: Counter[str] = Counter()

    def refusal(self, address: str) -> int | None:
        """The HTTP status to refuse with, or None when there is room."""
        if self.total >= self.total_cap:
            return 503
        if self.by_address[address] >= self.per_address_cap:
            return 429
        return None

    def take(self, address: str) -> None:
        self.total += 1
        self.by_address[address] += 1

    def give_back(self, address: str) -> None:
        self.total -= 1
        self.by_address[address] -= 1
        if self.by_address[address] <= 0:
            del self.by_address[address]

    @property
    def full(self) -> bool:
        return self.total >= self.total_cap


# Connections the kernel queues before they are accepted. asyncio's 100 overflowed when
# 1,100 sockets arrived in 5 s (issue 20, bug 4's attack): a client whose SYN is dropped
# then waits for TCP's one-second retry, which a prober saw as a 1 s stall although the
# loop was free. The waiting room (Waiting) bounds what is accepted.
LISTEN_BACKLOG = 1024


class Waiting:
    """Sockets that are not being served: waiting for their (next) request, whatever the
    protocol (an HTTP request not yet whole, a Wyoming connection before or between its
    requests). Each holds a file descriptor and buffers, and nothing else counts it.

    Each waits at most its own timeout, and at most ``limit`` wait at once: a newcomer
    beyond that drops the one that has waited longest, so sockets that send nothing, or
    a head and never its body, can neither exhaust the file descriptors nor lock real
    clients out (a real client's request comes within moments, before it is the oldest).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._waiting: dict[Hashable, tuple[asyncio.TimerHandle, Callable[[bool], None]]] = {}  # oldest first
        self.evicted = 0  # dropped to make room for a newcomer
        self.late = 0  # dropped for not sending their request in time

    def __len__(self) -> int:
        return len(self._waiting)

    def enter(self, key: Hashable, timeout: float, drop: Callable[[bool], None]) -> None:
        """``key`` waits from now; ``drop(late)`` is called once if it still waits after
        ``timeout`` seconds (``late`` True) or when a newcomer needs its place (False)."""
        self.leave(key)
        timer = asyncio.get_running_loop().call_later(timeout, self._expire, key)
        self._waiting[key] = (timer, drop)
        while len(self._waiting) > self.limit:
            self.evicted += 1
            self._drop(next(iter(self._waiting)), late=False)

    def leave(self, key: Hashable) -> None:
        """``key`` is served now, or gone."""
        entry = self._waiting.pop(key, None)
        if entry is not None:
            entry[0].cancel()

    def drop_all(self) -> None:
        """Shutdown: drop every waiting socket."""
        for key in list(self._waiting):
            self._drop(key, late=False)

    def _expire(self, key: Hashable) -> None:
        self.late += 1
        self._drop(key, late=True)

    def _drop(self, key: Hashable, *, late: bool) -> None:
        entry = self._waiting.pop(key, None)
        if entry is not None:
            entry[0].cancel()
            entry[1](late)
