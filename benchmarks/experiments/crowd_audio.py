"""The audio of streams that share the inference thread, kept for the shared scorers: N clients
send mixed sentences (an English opening, then Mandarin; no voice named) at once, for a number
of rounds, to a checkout's server (phrase cache off), and each stream is written to a WAV.

    python3 benchmarks/experiments/crowd_audio.py --tree DIR --out OUT [--n 4] [--rounds 3]
    WHISPER_DIR=... python ../shared/tools/asr_score.py OUT/items.json > OUT/scores.txt
    python ../shared/tools/dnsmos_score.py OUT/items.json
    python3 benchmarks/mixed_errors.py OUT [OUT2 ...]   # the Mandarin characters' CER apart

Used for docs/benchmarks.md, "The change of voice in a crowd": where a change moves the cuts
between Kokoro's runs of streams in a crowd, their audio is scored before and after. The
sentences are written for this (none is in the public set or the listeners' text).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import wave
from pathlib import Path

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import latency  # noqa: E402  (ServerProcess, connect, RATE)

SENTENCES = [
    "Good morning，欢迎来到上海图书馆，今天的开放时间是九点到五点。",
    "Attention please，前往广州的航班现在开始登机，请到十二号门。",
    "Thank you for calling，您的电话对我们很重要，请稍候。",
    "Next stop，人民广场站，换乘二号线的乘客请准备下车。",
]


async def stream(url: str, utt: str, text: str) -> bytes:
    ws = await latency.connect(url)  # pcm16 at latency.RATE, 20 ms frames
    try:
        await ws.send(msgpack.packb({"type": "speak", "id": utt, "text": text}))
        pcm = bytearray()
        while True:
            msg = msgpack.unpackb(await ws.recv())
            if msg.get("id") != utt:
                continue
            if msg["type"] == "audio":
                pcm += msg["data"]
            elif msg["type"] in ("end", "error"):
                return bytes(pcm)
    finally:
        await ws.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", type=Path, default=latency.ROOT)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    latency.ROOT = args.tree.resolve()  # the checkout whose server is measured
    server = latency.ServerProcess(600, args.out / "server.log")
    try:
        asyncio.run(stream(server.url, "warm", "Hello，你好。"))  # models loaded before the first round
        items = []
        for r in range(args.rounds):
            texts = [SENTENCES[(r + i) % len(SENTENCES)] for i in range(args.n)]
            got = asyncio.run(_round(server.url, texts))
            for i, (text, pcm) in enumerate(zip(texts, got)):
                path = args.out / f"mixed_r{r}s{i}.wav"
                with wave.open(str(path), "wb") as w:
                    w.setnchannels(1)
                    w.setsampwidth(2)
                    w.setframerate(latency.RATE)
                    w.writeframes(pcm)
                items.append({"lang": "zh", "text": text, "wav": str(path.resolve())})
        (args.out / "items.json").write_text(json.dumps(items, ensure_ascii=False, indent=1))
        print(f"{len(items)} streams in {args.out}")
    finally:
        server.stop()
    return 0


async def _round(url: str, texts: list[str]) -> list[bytes]:
    return list(await asyncio.gather(*(stream(url, f"u{i}", t) for i, t in enumerate(texts))))


if __name__ == "__main__":
    sys.exit(main())
