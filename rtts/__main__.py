"""Command line: ``rtts serve``, ``rtts say``, ``rtts voices``.

The only place that configures logging, installs signal handlers and picks the
event loop (uvloop or asyncio); library modules never do.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from . import audio, config, protocol

log = logging.getLogger("rtts")


def _runner(loop_name: str) -> Callable[[Coroutine[Any, Any, int]], int]:
    if loop_name in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if loop_name == "uvloop":
                raise SystemExit("rtts: --loop uvloop asked for, but uvloop is not installed") from None
        else:
            return lambda coro: uvloop.run(coro)
    return asyncio.run


async def _serve(cfg: config.Config) -> int:
    from .server import RttsServer
    from .service import Service

    server = RttsServer(Service(cfg))
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await server.close()
    return 0


async def _say(cfg: config.Config, args: argparse.Namespace) -> int:
    from .service import Service

    service = Service(cfg)
    service.start()
    try:
        samples, rate, end = await service.speak(args.text, args.voice, args.lang, args.speed, args.sample_rate)
    except protocol.ProtocolError as exc:
        print(f"rtts: {exc.code.value}: {exc.message}", file=sys.stderr)
        return 2
    finally:
        service.stop()
    Path(args.output).write_bytes(audio.wav_bytes(samples, rate))
    stats = end.stats
    print(
        f"{args.output}: {len(samples) / rate:.2f} s at {rate} Hz, "
        f"first audio {stats['ttfa_ms']:.0f} ms, rtf {stats['rtf']:.2f}",
        file=sys.stderr,
    )
    return 0


def _voices(cfg: config.Config) -> int:
    from .voices import VoiceRegistry

    assert cfg.cache_dir is not None
    registry = VoiceRegistry.discover(cfg.models_dir, cfg.cache_dir, cfg.threads, default_voice=cfg.default_voice)
    rows = [("ID", "ENGINE", "LANGS", "RATE", "NAME")]
    for v in registry.voices.values():
        mark = " (default)" if v.id == registry.default_voice else ""
        rows.append((v.id, v.engine, ",".join(v.langs), str(v.native_rate), v.name + mark))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    print(f"\nmodels dir: {cfg.models_dir}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rtts", description="Real-time text-to-speech over WebSocket.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the WebSocket/HTTP server")
    config.add_flags(serve)
    say = sub.add_parser("say", help="speak text into a WAV file, without a server")
    say.add_argument("text")
    say.add_argument("-o", "--output", default="out.wav")
    say.add_argument("--voice")
    say.add_argument("--lang")
    say.add_argument("--speed", type=float)
    config.add_flags(say, ["models_dir", "cache_dir", "threads", "log_level", "default_voice", "sample_rate"])
    voices = sub.add_parser("voices", help="list every voice found")
    config.add_flags(voices, ["models_dir", "cache_dir", "default_voice", "log_level"])
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = config.from_args(args)
    except (ValueError, OSError) as exc:
        print(f"rtts: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=cfg.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if cfg.log_level.lower() != "debug":
        # websockets logs every plain HTTP request at INFO; /healthz probes would flood the journal.
        logging.getLogger("websockets.server").setLevel(logging.WARNING)
    if args.command == "voices":
        return _voices(cfg)
    run = _runner(cfg.loop)
    if args.command == "say":
        return run(_say(cfg, args))
    return run(_serve(cfg))


if __name__ == "__main__":
    sys.exit(main())
