#!/usr/bin/env python3
"""Mandarin and Japanese beside English: first audio, RTF, concurrent streams, mixed sentences.

    python3 benchmarks/languages.py [--repeats 5] [--before DIR] [--generators teacher,student] [--no-peers] [--no-write]

The path users take first: Chinese text with **no voice named** (the server routes it
from the default voice to its Mandarin one), then the same with the Mandarin voice named,
Japanese both ways, and English for scale. For each build (this checkout, and with
``--before DIR`` a second checkout, e.g. ``git archive de0f221~1 | tar -x -C DIR``, the two
taking turns text by text so both see the same host minutes; with ``--generators``, this
checkout once per Kokoro generator, ``--generator teacher`` beside ``--generator student``,
issue 31) it starts
``python3 -m rtts serve --phrase-cache-mb 0`` (latency.ServerProcess), warms every
voice, and measures on a warm connection:

* first audio (``speak`` sent → first ``audio`` frame, client side), p50 and p95 over
  ``--repeats`` runs, for a short phrase, one sentence and a two-sentence paragraph;
* RTF (``end.stats.rtf``), and the first ``mark``'s text (what the first unit was);
* 1, 2 and 3 concurrent Mandarin streams (no voice named), each client playing in real
  time from its first frame (latency.Stream: an underrun is a frame that comes > 5 ms
  after the audio before it ran out);
* mixed-language sentences (no voice named), one listener: underruns per run.

The peer is kokoro-onnx (``create_stream``, same model file and the same voice, its own
espeak-ng phonemes: ``cmn`` for Mandarin, ``ja`` for Japanese) in the peers' venv
(``--peers-python``, see latency.py). The host probe of latency.py is printed before and
after. The table goes into docs/benchmarks.md, section "Mandarin and Japanese
(issue 21)", unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import latency  # noqa: E402  (ServerProcess, Stream, connect, pct, probe_ms, write_doc)
import msgpack  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- languages:begin -->", "<!-- languages:end -->"

ZH, JA, EN = "kokoro/zf_xiaoxiao", "kokoro/jf_alpha", "kokoro/af_heart"
TEXTS = {
    "zh": {
        "phrase": "欢迎光临。",
        "sentence": "各位旅客请注意，开往上海虹桥的列车现在开始检票。",
        "paragraph": "请注意，本次列车即将到达杭州东站。下车的旅客请带好您的随身物品，从列车前进方向的右侧车门下车。",
    },
    "ja": {
        "phrase": "ようこそ。",
        "sentence": "東京駅へようこそ。次の電車は5分後に発車します。",
        "paragraph": "まもなく一番線に電車がまいります。危ないですから黄色い線までお下がりください。",
    },
    "en": {
        "phrase": "Welcome.",
        "sentence": "Please stand clear of the closing doors.",
        "paragraph": "The morning train to Boston leaves from platform four at ten thirty. "
                     "Passengers should have their tickets ready before boarding.",
    },
}
# (row label, lang, voice or None for the server's choice)
CASES = (
    ("Mandarin, no voice named", "zh", None),
    ("Mandarin, zf_xiaoxiao named", "zh", ZH),
    ("Japanese, no voice named", "ja", None),
    ("Japanese, jf_alpha named", "ja", JA),
    ("English, af_heart named", "en", EN),
    ("English, no voice named (the default voice)", "en", None),
)
MIXED = (
    "Hello，欢迎来到杭州！今日は東京です。粤语好听吗？Yes, very good!",
    "Welcome aboard，本次列车开往北京南站，请您注意安全。",
    "The next stop is 上海虹桥站，please mind the gap.",
    "Hi. 欢迎光临，请出示您的车票。",
)
PEER_VOICES = {"zh": ("zf_xiaoxiao", "cmn"), "ja": ("jf_alpha", "ja"), "en": ("af_heart", "en-us")}


async def runs(url: str, text: str, voice: str | None, repeats: int) -> list[tuple[latency.Stream, str]]:
    """``repeats`` utterances on one warm connection: (stream, first mark's text)."""
    ws = await latency.connect(url)
    try:
        out = []
        for i in range(repeats):
            stream, first_mark = await speak(ws, f"r{i}", text, voice)
            out.append((stream, first_mark))
            await asyncio.sleep(0.2)
        return out
    finally:
        await ws.close()


async def speak(ws, utt_id: str, text: str, voice: str | None) -> tuple[latency.Stream, str]:  # type: ignore[no-untyped-def]
    stream, first_mark = latency.Stream(), ""
    request = {"type": "speak", "id": utt_id, "text": text} | ({"voice": voice} if voice else {})
    await ws.send(msgpack.packb(request))
    stream.sent = time.perf_counter()
    while True:
        msg = msgpack.unpackb(await ws.recv())
        if msg.get("id") != utt_id:
            continue
        if msg["type"] == "audio":
            stream.frame(time.perf_counter(), len(msg["data"]) / 2 / latency.RATE)
        elif msg["type"] == "mark" and not first_mark:
            first_mark = msg.get("text", "")
        elif msg["type"] == "error":
            stream.reason = f"error {msg['code']}: {msg['message']}"
        elif msg["type"] == "end":
            stream.stats, stream.reason = msg.get("stats", {}), stream.reason or msg["reason"]
            return stream, first_mark


async def together(url: str, text: str, n: int) -> list[latency.Stream]:
    sockets = [await latency.connect(url) for _ in range(n)]
    try:
        done = await asyncio.gather(*(speak(ws, "c", text, None) for ws in sockets))
        return [s for s, _ in done]
    finally:
        for ws in sockets:
            await ws.close()


def measure(servers: dict[str, latency.ServerProcess], repeats: int, streams_n: tuple[int, ...] = (1, 2, 3),
            mixed_runs: int = 3, only_mixed: bool = False) -> dict:
    """Every case on every build's server, the builds taking turns case by case."""
    results: dict = {}
    for name, server in servers.items():  # warm every voice and front end
        for _, lang, voice in CASES:
            asyncio.run(runs(server.url, TEXTS[lang]["sentence"], voice, 1))
    for label, lang, voice in () if only_mixed else CASES:
        for kind, text in TEXTS[lang].items():
            for name, server in servers.items():
                got = asyncio.run(runs(server.url, text, voice, repeats))
                bad = [s.reason for s, _ in got if s.reason != "done"]
                if bad:
                    raise RuntimeError(f"{name} {label} {kind}: {bad[0]}")
                cell = results.setdefault((label, kind), {}).setdefault(name, {})
                cell["ttfa"] = [s.ttfa for s, _ in got]
                cell["rtf"] = [s.stats.get("rtf", float("nan")) for s, _ in got]
                cell["mark"] = got[0][1]
                print(f"  {name:10} {label:45} {kind:9} first audio p50 "
                      f"{latency.ms(latency.pct(cell['ttfa'], 50))}  first mark {cell['mark']!r}", flush=True)
    for n in () if only_mixed else streams_n:
        for name, server in servers.items():
            streams = asyncio.run(together(server.url, TEXTS["zh"]["paragraph"], n))
            results.setdefault(("streams", n), {})[name] = streams
            print(f"  {name:10} {n} Mandarin streams: underruns {[s.underruns for s in streams]}, "
                  f"first audio {[round(s.ttfa * 1000) for s in streams]} ms", flush=True)
    for text in MIXED:
        for _ in range(mixed_runs):  # the builds take turns run by run
            for name, server in servers.items():
                got = asyncio.run(runs(server.url, text, None, 1))
                results.setdefault(("mixed", text), {}).setdefault(name, []).extend(s for s, _ in got)
        for name in servers:
            got_streams = results[("mixed", text)][name]
            print(f"  {name:10} mixed {text[:24]!r}: underruns {[s.underruns for s in got_streams]}, gaps "
                  f"{[round(s.gap_s * 1000) for s in got_streams]} ms, first audio "
                  f"{[round(s.ttfa * 1000) for s in got_streams]} ms", flush=True)
    return results


def run_peer(python: str, repeats: int, work: Path) -> dict:
    """kokoro-onnx on the same texts, model file and voices."""
    sys.path.insert(0, str(ROOT))
    from rtts.config import Config
    from rtts.engines.kokoro import KokoroEngine, KokoroPack
    from rtts.engines.voices import VoiceRegistry

    config = Config()
    assert config.cache_dir is not None
    registry = VoiceRegistry.discover(config.models_dir, config.cache_dir, threads=2)
    kokoro = registry.engines["kokoro"]
    assert isinstance(kokoro, KokoroEngine)
    # The pip pack has the Japanese styles, rtts's shipped file the Mandarin and English ones.
    import numpy as np

    voices = work / "peer-voices.npz"
    with np.load(KokoroPack.find().voices) as pack, np.load(ROOT / "models" / "kokoro-voices.npz") as shipped:
        np.savez(voices, **{name: pack[name] for name in pack.files}, **{name: shipped[name] for name in shipped.files})
    out = {}
    for lang, (voice, espeak_lang) in PEER_VOICES.items():
        texts = work / f"peer-{lang}.json"
        texts.write_text(json.dumps(TEXTS[lang]))
        cmd = [python, str(ROOT / "benchmarks" / "peers.py"), "kokoro", "--model", str(kokoro.model_path()),
               "--voices", str(voices), "--voice", voice, "--lang", espeak_lang,
               "--texts", str(texts), "--repeats", str(repeats)]
        print(f"  kokoro-onnx {lang} ...", flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)
            raise RuntimeError("kokoro-onnx failed")
        out[lang] = json.loads(done.stdout)["runs"]
    return out


def report(results: dict, builds: list[str], peer: dict, command: str, probes: list[float]) -> str:
    ms, pct = latency.ms, latency.pct
    lines = [
        f"Command: `{command}`; run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {latency.cpu_model()}; "
        f"host probe (latency.py `probe_ms`) {', '.join(f'{p:.0f}' for p in probes)} ms (before, after rtts, after the peer). "
        "Warm server, phrase cache off; first audio is `speak` → first `audio` frame at the client, p50 and p95 of "
        f"{len(next(iter(results.values()))[builds[0]]['ttfa']) if results else 0} runs each, RTF the median of "
        "the same runs; \"first unit\" is the first `mark`'s text.",
        "",
        "| voice, text | " + " | ".join(f"{b}: first audio p50 / p95, RTF, first unit" for b in builds)
        + " | kokoro-onnx (same voice, espeak-ng phonemes) first audio p50, RTF |",
        "|---|" + "---|" * (len(builds) + 1),
    ]
    for label, lang, _ in CASES:
        for kind, text in TEXTS[lang].items():
            cells = []
            for b in builds:
                c = results[(label, kind)][b]
                rtf = statistics.median(x for x in c["rtf"] if x == x)
                cells.append(f"{ms(pct(c['ttfa'], 50))} / {ms(pct(c['ttfa'], 95))}, {rtf:.3f}, “{c['mark']}”")
            theirs = "—"
            if peer and "no voice" not in label and lang in peer:
                p = peer[lang][kind]
                theirs = (f"{ms(pct([x['ttfa_s'] for x in p], 50))}, "
                          f"{statistics.median(x['total_s'] / x['audio_s'] for x in p):.3f}")
            lines.append(f"| {label}: {kind} “{text}” | " + " | ".join(cells) + f" | {theirs} |")
    mixed_runs = max((len(v[builds[0]]) for k, v in results.items() if k[0] == "mixed"), default=0)
    lines += ["", "Concurrent Mandarin streams (the paragraph, no voice named), and mixed sentences (no voice "
              f"named, {mixed_runs} runs each, one listener): underruns per stream or run.", "",
              "| load | " + " | ".join(f"{b}: underruns (first audio)" for b in builds) + " |",
              "|---|" + "---|" * len(builds)]
    for key in [k for k in results if k[0] == "streams"] + [k for k in results if k[0] == "mixed"]:
        label = f"{key[1]} Mandarin stream{'s' if key[1] > 1 else ''}" if key[0] == "streams" else f"“{key[1]}”"
        cells = [", ".join(f"{s.underruns} ({ms(s.ttfa)})" for s in results[key][b]) for b in builds]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--before", type=Path, help="a checkout of the previous build, measured in alternation")
    p.add_argument("--streams", default="1,2,3", help="concurrent Mandarin streams to try, e.g. 1,2,4,8")
    p.add_argument("--generators", default="", help="e.g. teacher,student: this checkout once per Kokoro generator")
    p.add_argument("--peers-python", default="/work/peers-venv/bin/python")
    p.add_argument("--no-peers", dest="peers", action="store_false")
    p.add_argument("--no-write", dest="write", action="store_false")
    p.add_argument("--mixed-runs", type=int, default=3, help="runs of each mixed sentence per build")
    p.add_argument("--only-mixed", action="store_true", help="the mixed sentences alone (no table is written)")
    args = p.parse_args()
    builds = latency.builds(args.before, args.generators)
    work = Path(tempfile.mkdtemp(prefix="rtts-languages-"))
    print(f"host: {latency.cpu_model()}", flush=True)
    probes = [latency.probe_ms()]
    servers: dict[str, latency.ServerProcess] = {}
    try:
        for name, (root, extra) in builds.items():  # all up at once; only one is spoken to at a time
            latency.ROOT = root  # ServerProcess starts the server from this checkout
            servers[name] = latency.ServerProcess(600, work / f"{name.replace(' ', '-')}.log", *extra)
        latency.ROOT = ROOT
        results = measure(servers, args.repeats, tuple(int(n) for n in args.streams.split(",")), args.mixed_runs,
                          args.only_mixed)
    finally:
        for server in servers.values():
            server.stop()
    probes.append(latency.probe_ms())
    if args.only_mixed:
        print(f"host probe (latency.py probe_ms): {probes[0]:.0f} ms before, {probes[1]:.0f} ms after")
        return 0
    peer = run_peer(args.peers_python, args.repeats, work) if args.peers else {}
    if args.peers:
        probes.append(latency.probe_ms())
    command = "python3 benchmarks/languages.py" + ("" if not sys.argv[1:] else " " + " ".join(sys.argv[1:]))
    section = report(results, list(builds), peer, command, probes)
    print("\n" + section)
    if args.write:
        latency.write_doc(section, BEGIN, END, "Mandarin and Japanese (issue 21)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
