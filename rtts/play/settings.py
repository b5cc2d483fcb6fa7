"""The player's one configuration file (TOML), every key also a flag of ``rtts play``
(a flag wins). ``systemd/rtts-player.service`` reads ``/etc/rtts/player.toml``:

    servers = ["ws://announce.local:8765/ws"]   # tried in turn; several behind nginx is one
    channels = ["platform-1", "all"]
    token_file = "/etc/rtts/token"              # the server's connection token, if it has one
    output = "default"                          # a sound device (`rtts play --list-devices`),
                                                # or "file:/run/snapserver/rtts" (a FIFO), or "-"
    sample_rate = 48000
    output_channels = 2
    trim_ms = 0                                 # added to what the device reports (HDMI, Bluetooth)
    metrics = "127.0.0.1:9108"                  # /metrics; "" for none

Validated once, here: a value out of range stops the player at start with a message
naming the key, never later."""

from __future__ import annotations

import argparse
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from rtts import protocol

CHANNEL_LIMIT = 16  # what one connection may subscribe to (docs/protocol.md)


@dataclass(frozen=True)
class PlayerSettings:
    servers: tuple[str, ...] = ("ws://127.0.0.1:8765/ws",)
    channels: tuple[str, ...] = ("default",)
    token_file: str = ""
    output: str = "default"
    sample_rate: int = 48000
    output_channels: int = 2
    block_ms: int = 10
    trim_ms: float = 0.0
    metrics: str = ""
    log_level: str = "info"

    def check(self) -> None:
        problems = []
        for url in self.servers:
            parsed = urlparse(url)
            if parsed.scheme not in ("ws", "wss") or not parsed.hostname:
                problems.append(f"servers: {url!r} is not a ws:// or wss:// URL")
        if not self.servers:
            problems.append("servers: at least one")
        if not self.channels or len(self.channels) > CHANNEL_LIMIT:
            problems.append(f"channels: 1 to {CHANNEL_LIMIT}")
        if any(not c or len(c) > 64 for c in self.channels):
            problems.append("channels: names of 1 to 64 characters")
        if self.sample_rate not in protocol.SAMPLE_RATES:
            problems.append(f"sample_rate: one of {', '.join(map(str, protocol.SAMPLE_RATES))}")
        if self.output_channels not in (1, 2):
            problems.append("output_channels: 1 or 2")
        if not 2 <= self.block_ms <= 50:
            problems.append("block_ms: 2 to 50")
        if not -1000 <= self.trim_ms <= 1000:
            problems.append("trim_ms: -1000 to 1000")
        if self.metrics and not _host_port(self.metrics):
            problems.append(f"metrics: HOST:PORT, not {self.metrics!r}")
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            problems.append("log_level: debug, info, warning or error")
        if problems:
            raise ValueError("; ".join(problems))

    def token(self) -> str | None:
        if not self.token_file:
            return None
        token = Path(self.token_file).read_text(encoding="utf-8").strip()
        return token or None

    def metrics_address(self) -> tuple[str, int] | None:
        return _host_port(self.metrics) if self.metrics else None


def _host_port(value: str) -> tuple[str, int] | None:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="a TOML file of the settings below (flags win)")
    parser.add_argument("--server", dest="servers", action="append", metavar="URL",
                        help="ws://HOST:PORT/ws of an rtts server; repeat for more, tried in turn")
    parser.add_argument("--channel", dest="channels", action="append", metavar="NAME", help="a channel to hear; repeat for more")
    parser.add_argument("--token-file", help="a file holding the server's connection token")
    parser.add_argument("--output", help='a sound device name or number, "file:PATH" (a FIFO: Snapcast) or "-" (stdout)')
    parser.add_argument("--sample-rate", type=int)
    parser.add_argument("--output-channels", type=int)
    parser.add_argument("--block-ms", type=int)
    parser.add_argument("--trim-ms", type=float, help="added to the output latency the device reports")
    parser.add_argument("--metrics", help="HOST:PORT to serve /metrics on")
    parser.add_argument("--log-level")
    parser.add_argument("--list-devices", action="store_true", help="list the sound devices and exit")


def from_args(args: argparse.Namespace) -> PlayerSettings:
    values: dict[str, Any] = {}
    if args.config is not None:
        values.update(from_toml(args.config.read_text(encoding="utf-8")))
    for f in fields(PlayerSettings):
        flag = getattr(args, f.name, None)
        if flag is not None:
            values[f.name] = tuple(flag) if isinstance(flag, list) else flag
    settings = replace(PlayerSettings(), **values)
    settings.check()
    return settings


def from_toml(text: str) -> dict[str, Any]:
    raw = tomllib.loads(text)
    known = {f.name: f for f in fields(PlayerSettings)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ValueError(f"unknown keys: {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        default = getattr(PlayerSettings(), key)
        if isinstance(default, tuple):
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{key}: a list of strings")
            value = tuple(value)
        elif isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not type(default):
            raise ValueError(f"{key}: a {type(default).__name__}, not {value!r}")
        values[key] = value
    return values
