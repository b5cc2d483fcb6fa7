"""systemd's notify protocol and socket activation, without libsystemd.

``sd_notify`` is one datagram of ``KEY=value`` lines to the AF_UNIX socket named in
``NOTIFY_SOCKET`` (a leading ``@`` names an abstract socket); see sd_notify(3). With
no ``NOTIFY_SOCKET`` every call is a no-op, so the server runs the same without systemd.

The watchdog (``WatchdogSec=`` in the unit, exported as ``WATCHDOG_USEC``) is fed only
while the service is healthy: the ping runs on the event loop, so a blocked loop stops
it, and it is skipped while the inference thread has shown no progress for a whole
watchdog interval, so a hung model call gets the service restarted too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

SD_LISTEN_FDS_START = 3


class Notifier:
    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        address = environ.get("NOTIFY_SOCKET", "")
        self.address: str | None = None
        if address.startswith("@"):
            self.address = "\0" + address[1:]
        elif address.startswith("/"):
            self.address = address
        self.watchdog_s = _watchdog_interval(environ)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *lines: str) -> bool:
        """Send one datagram; False when there is no socket or it failed (never raises)."""
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(self.address)
                sock.sendall("\n".join(lines).encode())
        except OSError as exc:
            log.warning("sd_notify to %s failed: %s", self.address.replace("\0", "@"), exc)
            return False
        return True

    def ready(self, status: str) -> None:
        self.notify("READY=1", f"STATUS={status}")

    def stopping(self, status: str = "shutting down") -> None:
        self.notify("STOPPING=1", f"STATUS={status}")

    def extend_timeout(self, seconds: float, status: str) -> None:
        self.notify(f"EXTEND_TIMEOUT_USEC={int(seconds * 1_000_000)}", f"STATUS={status}")

    async def watchdog(self, healthy: Callable[[], bool]) -> None:
        """Ping every half interval while ``healthy()``; runs until cancelled."""
        if self.watchdog_s is None or self.address is None:
            return
        silent = False
        while True:
            await asyncio.sleep(self.watchdog_s / 2)
            if healthy():
                self.notify("WATCHDOG=1")
                if silent:
                    log.info("watchdog: healthy again")
                silent = False
            elif not silent:
                silent = True
                log.error("watchdog: the inference thread is not making progress; not pinging systemd")


def _watchdog_interval(environ: Mapping[str, str]) -> float | None:
    usec = environ.get("WATCHDOG_USEC")
    pid = environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 1_000_000 if value > 0 else None


def listen_socket(environ: Mapping[str, str] = os.environ) -> socket.socket | None:
    """The first socket systemd passed (``LISTEN_FDS``), or None when not socket-activated."""
    if environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    try:
        count = int(environ.get("LISTEN_FDS", "0"))
    except ValueError:
        return None
    if count < 1:
        return None
    if count > 1:
        log.warning("systemd passed %d sockets; serving on the first only", count)
    # Unset so a child process does not think these sockets are its own.
    for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(key, None)
    sock = socket.socket(fileno=SD_LISTEN_FDS_START)
    sock.setblocking(False)
    return sock
