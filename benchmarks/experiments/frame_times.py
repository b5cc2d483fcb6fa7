"""When each burst of one stream's frames came, and the audio its listener still held then.

    python3 benchmarks/experiments/frame_times.py [--voice piper/en_US-joe-medium] [--lang en]
        [--text "..."] [--bursts 8]
    python3 benchmarks/experiments/frame_times.py --voice "" --lang zh --text "各位旅客，本次列车开往北京南站。"

One server (phrase cache off), the text spoken twice by one client (the first loads the
voice), the second's frames grouped into bursts as ``latency.Stream`` groups them (frames
closer than ``latency.BURST_S``): each burst's arrival after the request, its audio, and
what a listener playing from the first frame still held when it began to come. Used for
docs/benchmarks.md, "Streams per box without a gap": Piper's least audio held is its start.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import latency  # noqa: E402  (ServerProcess, connect, RATE, BURST_S)

TEXT = "The next train to Boston leaves from platform four at ten thirty. Please stand clear of the doors."


async def bursts(url: str, voice: str, lang: str, text: str) -> list[tuple[float, float]]:
    """(arrival s after the request, audio s) of each burst of frames."""
    ws = await latency.connect(url)
    try:
        request = {"type": "speak", "id": "f", "text": text, **({"lang": lang} if lang else {}), **({"voice": voice} if voice else {})}
        await ws.send(msgpack.packb(request))
        t0 = time.perf_counter()
        out: list[tuple[float, float]] = []
        last = -1.0
        while True:
            msg = msgpack.unpackb(await ws.recv())
            if msg.get("type") == "end":
                return out
            if msg.get("type") != "audio":
                continue
            now, seconds = time.perf_counter() - t0, len(msg["data"]) / 2 / latency.RATE
            if out and now - last <= latency.BURST_S:
                out[-1] = (out[-1][0], out[-1][1] + seconds)
            else:
                out.append((now, seconds))
            last = now
    finally:
        await ws.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--voice", default="piper/en_US-joe-medium", help='"" for none named (the language chooses)')
    p.add_argument("--lang", default="en")
    p.add_argument("--text", default=TEXT)
    p.add_argument("--bursts", type=int, default=8)
    args = p.parse_args()
    print(f"host: {latency.cpu_model()}; host probe {latency.probe_ms():.0f} ms", flush=True)
    server = latency.ServerProcess(600, Path(tempfile.mkdtemp(prefix="rtts-frames-")) / "server.log")
    try:
        asyncio.run(bursts(server.url, args.voice, args.lang, args.text))  # the voice loaded
        runs_out = None
        for at, seconds in asyncio.run(bursts(server.url, args.voice, args.lang, args.text))[: args.bursts]:
            held = 0.0 if runs_out is None else runs_out - at
            print(f"{at * 1000:7.1f} ms: {seconds * 1000:5.0f} ms of audio, the listener holding {held * 1000:6.1f} ms")
            runs_out = max(runs_out if runs_out is not None else at, at) + seconds
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
