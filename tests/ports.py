"""A free TCP port on the loopback for a test's or a benchmark's own server (one helper,
where seven files had each their copy)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now: the system's choice for a socket bound to port 0.
    Another process may take it before the caller binds it; on a test box that is rare
    enough, and a server that cannot bind says so."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
