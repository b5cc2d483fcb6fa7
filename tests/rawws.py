"""A WebSocket client on a bare socket, for clients that misbehave on purpose:
one that stops reading (tiny receive buffer, never calls recv), one that sends
half a frame and vanishes."""

from __future__ import annotations

import base64
import os
import socket
import struct

import msgpack


def frame(payload: bytes, opcode: int = 0x2) -> bytes:
    """One masked client frame (RFC 6455 §5.2)."""
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def open_raw(port: int, rcvbuf: int | None = 4096, headers: str = "") -> socket.socket:
    """A connected, upgraded socket whose receive buffer is ``rcvbuf`` bytes (kernel doubles it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{headers}\r\n"
        ).encode()
    )
    response = b""
    while b"\r\n\r\n" not in response:
        chunk = sock.recv(1)  # byte by byte: leave every frame after the headers unread
        if not chunk:
            raise ConnectionError("closed during the handshake")
        response += chunk
    if not response.startswith(b"HTTP/1.1 101"):
        raise ConnectionError(response.decode(errors="replace"))
    return sock


def send_msg(sock: socket.socket, **msg: object) -> None:
    sock.sendall(frame(msgpack.packb(msg)))


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """One unmasked server frame: (opcode, payload)."""

    def exact(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out

    b0, b1 = exact(2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", exact(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", exact(8))[0]
    return b0 & 0x0F, exact(n)
