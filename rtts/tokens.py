"""A token as the client carries it and the server checks it (pure).

The handshake (``serve/access.py``), a session's ``hello`` and ``publish``
(``speech/session.py``) and the headless player (``play/listener.py``) all need these,
so they sit below every layer that does. The token rides in the subprotocol list because
browsers cannot set headers on a WebSocket request:
``new WebSocket(url, ["rtts.v1", "rtts.auth." + base64url(token)])``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Iterable

AUTH_PREFIX = "rtts.auth."


def token_ok(given: str | None, expected: str) -> bool:
    """Constant-time comparison; ``None`` is never a match."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())


def encode_token(token: str) -> str:
    """The subprotocol that carries ``token`` (base64url without padding: a valid HTTP token)."""
    return AUTH_PREFIX + base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")


def subprotocol_token(offered: Iterable[str]) -> tuple[bool, str | None]:
    """(whether a token was offered, the token or None when it does not decode)."""
    for item in offered:
        if item.startswith(AUTH_PREFIX):
            raw = item[len(AUTH_PREFIX) :]
            try:
                padded = raw + "=" * (-len(raw) % 4)
                return True, base64.b64decode(padded, altchars=b"-_", validate=True).decode()
            except (binascii.Error, ValueError):
                return True, None
    return False, None
