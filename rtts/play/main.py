"""``rtts play``: hear channels of an rtts server on this box's sound output, in step."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from rtts.play.listener import Listener
from rtts.play.outputs import make_output
from rtts.play.player import Player
from rtts.play.settings import PlayerSettings, from_args

log = logging.getLogger("rtts.play")


def main(args: argparse.Namespace) -> int:
    if args.list_devices:
        import sounddevice as sd

        print(sd.query_devices())
        return 0
    try:
        settings = from_args(args)
        settings.token()
    except (ValueError, OSError) as exc:
        print(f"rtts play: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("websockets").setLevel(logging.WARNING)
    return asyncio.run(play(settings))


async def play(settings: PlayerSettings) -> int:
    player = Player(settings.sample_rate)
    output = make_output(settings.output, settings.sample_rate, settings.output_channels, settings.block_ms,
                         settings.trim_ms / 1000)
    listener = Listener(settings, player)
    address = settings.metrics_address()
    if address is not None:
        from prometheus_client import CollectorRegistry, start_http_server

        from rtts.play.metrics import PlayerCollector

        registry = CollectorRegistry()
        registry.register(PlayerCollector(player, listener, output))
        start_http_server(address[1], address[0], registry=registry)
    try:
        output.start(player.fill)
    except (ImportError, OSError, ValueError) as exc:  # no sounddevice, no PortAudio, no such device
        log.error("cannot play on %r: %s (a sound device needs the play extra: pip install '.[play]', "
                  "and Debian's libportaudio2)", settings.output, exc)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(listener.run(), name="rtts-play-listener")
    stopping = asyncio.create_task(stop.wait())
    dead = asyncio.create_task(_output_ended(output), name="rtts-play-output")
    try:
        await asyncio.wait({task, stopping, dead}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        task.cancel()
        dead.cancel()
        output.stop()
    if dead.done() and not dead.cancelled():
        log.error("the output stopped (its reader went away?): exiting, for systemd to start the player again")
        return 1
    if task.done() and not task.cancelled() and task.exception() is not None:
        log.error("the listener stopped", exc_info=task.exception())
        return 1
    return 0


async def _output_ended(output: object) -> None:
    """Returns when a file output's writer thread has stopped (its FIFO's reader went away);
    a sound device's stream never ends by itself."""
    while not getattr(output, "stopped", False):
        await asyncio.sleep(1.0)
