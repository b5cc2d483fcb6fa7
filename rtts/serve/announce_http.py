"""``POST /v1/announce``: publish an announcement over HTTP.

The request is turned into the ``publish`` message a WebSocket client would send and
goes through a connection of its own, so HTTP and WebSocket publishers meet the same
checks (the token when the server has one, the publish token, the text, voice and
language) and the same channel queue. Transport-free: the route hands over the body
and two headers and sends back the status and JSON it gets.

    POST /v1/announce
    Authorization: Bearer PUBLISH_TOKEN
    X-Rtts-Token: TOKEN                  (only when the server has --token)
    {"channel": "lobby", "text": "…", "voice": "…", "lang": "en", "priority": "high", "not_before": 1767225600}
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from rtts import protocol
from rtts.protocol import ErrorCode
from rtts.serve.connection import Connection

if TYPE_CHECKING:
    from rtts.service import Service

__all__ = ["announce"]

_FIELDS = ("channel", "text", "voice", "lang", "speed", "priority", "not_before", "play_at", "generator")
_STATUS = {
    ErrorCode.UNAUTHORIZED: HTTPStatus.UNAUTHORIZED,
    ErrorCode.FORBIDDEN: HTTPStatus.FORBIDDEN,
    ErrorCode.QUEUE_FULL: HTTPStatus.TOO_MANY_REQUESTS,
    ErrorCode.BUS_UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
}


def _bearer(authorization: str | None) -> str | None:
    scheme, _, value = (authorization or "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def _error(code: ErrorCode, message: str) -> tuple[HTTPStatus, dict[str, Any]]:
    return _STATUS.get(code, HTTPStatus.BAD_REQUEST), {"error": code.value, "message": message}


async def announce(
    service: Service, body: bytes, authorization: str | None, token: str | None
) -> tuple[HTTPStatus, dict[str, Any]]:
    """(status, JSON body): 202 with ``published``'s fields, or 4xx/503 with ``error`` and ``message``."""
    if len(body) > service.config.max_message_bytes:
        return _error(ErrorCode.BAD_MESSAGE, f"body is larger than {service.config.max_message_bytes} bytes")
    try:
        request = protocol.decode_json(body, max_bytes=service.config.max_message_bytes)
    except protocol.ProtocolError as exc:
        return _error(ErrorCode.BAD_MESSAGE, f"the body must be a JSON object: {exc.message}")
    for name in ("channel", "text"):
        if request.get(name) is None:
            return _error(ErrorCode.MISSING_FIELD, f"give {name!r}")
    # Checked as a WebSocket client's publish is (protocol.check, in the session): types,
    # channel name, Unicode, finite numbers; integers stay integers until then.
    fields = {k: request[k] for k in _FIELDS if request.get(k) is not None}

    answer: asyncio.Future[protocol.ServerMessage] = asyncio.get_running_loop().create_future()

    class Publisher(Connection):
        def deliver(self, message: protocol.ServerMessage) -> None:
            if isinstance(message, (protocol.Published, protocol.Error)) and not answer.done():
                answer.set_result(message)

    conn = Publisher(service, voices_at="GET /voices")
    try:
        conn.open()
        if service.config.token is not None:
            conn.handle(protocol.Hello(token=token))
        conn.handle(protocol.Publish(token=_bearer(authorization), **fields))
        result = await answer
    finally:
        conn.close()
    if isinstance(result, protocol.Error):
        return _error(ErrorCode(result.code), result.message)
    assert isinstance(result, protocol.Published)
    return HTTPStatus.ACCEPTED, {
        "channel": result.channel, "id": result.id, "seq": result.seq,
        "queued": result.queued, "queue_limit": result.queue_limit,
    }
