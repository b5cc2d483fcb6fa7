#!/usr/bin/env python3
"""The English voices side by side in one run: Hibari heart, Piper joe and Kokoro af_heart.

    WHISPER_DIR=$HOME/.cache/whisper-base python3 benchmarks/english_voices.py
    python3 benchmarks/latency.py --english-voices ...   # the same, after latency.py's own run

Kokoro's ``af_heart`` is built in (``models/kokoro-voices.npz``); ``--models-dir DIR``
serves from another models directory (a build without it can be given
``DIR/af_heart.npy`` from ``kokoro-js@1.2.1``'s ``package/voices/af_heart.bin``, raw
float32 510x256).

One server (``python3 -m rtts serve``, phrase cache off) speaks with each voice, over
WebSocket, as ``benchmarks/latency.py`` drives it:

* time to first audio, one sentence and a three-sentence paragraph, p50 and p95 over
  ``--repeats`` runs on a warm connection, and RTF from ``end.stats``;
* concurrent streams, every one speaking the paragraph and playing in real time from
  its first frame: the most streams with zero underruns (the climb stops at the first
  level with any);
* intelligibility: every English sentence of the public set and of
  ``benchmarks/sentences/en*.json`` spoken by each voice (``intelligibility.py``),
  scored by the shared ``asr_score.py`` (WER, Whisper base), and the same WAVs rated by
  ``dnsmos_score.py`` (DNSMOS P.808), once the server has stopped.

The table goes into docs/benchmarks.md, section "English voices" (``--no-write`` leaves
the file alone).
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
import intelligibility  # noqa: E402
import latency  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- english-voices:begin -->", "<!-- english-voices:end -->"
VOICES = ("hibari/heart", "piper/en_US-joe-medium", "kokoro/af_heart")
LEVELS = (1, 2, 4, 8, 16, 24, 32, 48)
DNSMOS = intelligibility.SHARED_TOOLS / "dnsmos_score.py"


def english_sentences(path: Path) -> Path:
    """One file with the public set's English sentences and the project's own English sets."""
    entries: list = []
    for source in [intelligibility.PUBLIC_SENTENCES, *sorted(intelligibility.LOCAL_SENTENCES.glob("en*.json"))]:
        entries += json.loads(source.read_text(encoding="utf-8")).get("en", [])
    path.write_text(json.dumps({"en": entries}, ensure_ascii=False), encoding="utf-8")
    return path


def climb(url: str, voice: str, levels: list[int]) -> dict[int, dict]:
    out = {}
    for n in levels:
        streams = asyncio.run(latency.concurrent(url, voice, latency.TEXTS["paragraph"], n))
        under = [s.underruns for s in streams]
        failed = sum(s.reason != "done" for s in streams)
        out[n] = {"underruns": under, "gap_s": sum(s.gap_s for s in streams), "failed": failed,
                  "ttfa": [s.ttfa for s in streams]}
        print(f"  {voice:24} {n:2} streams: underruns/stream mean {statistics.mean(under):.2f} max {max(under)}, "
              f"TTFA p50 {latency.ms(latency.pct(out[n]['ttfa'], 50))}", flush=True)
        if sum(under) or failed:
            break
    return out


def quality(url: str, voices: list[str], sentences: Path, out: Path) -> dict[str, dict]:
    """WER per voice from intelligibility.py (which runs asr_score.py), WAVs kept for DNSMOS."""
    results = {}
    for voice in voices:
        folder = out / intelligibility.safe_name(voice)
        report = folder / "results.json"
        status = intelligibility.main(["--url", url, "--voices", voice, "--sentences", str(sentences),
                                       "--langs", "en", "--out", str(folder), "--json", str(report),
                                       "--scorer-python", sys.executable])
        doc = json.loads(report.read_text(encoding="utf-8"))
        row = doc["summary"][voice]["en"]
        results[voice] = {"wer": row["error"], "n": row["scored"], "status": status,
                          "wavs": [u["wav"] for u in doc["utterances"] if u["ok"]]}
    return results


def dnsmos(results: dict[str, dict], out: Path) -> None:
    for voice, r in results.items():
        items = out / f"{intelligibility.safe_name(voice)}-dnsmos.json"
        items.write_text(json.dumps([{"lang": "en", "text": "", "wav": w} for w in r["wavs"]]))
        scores = out / f"{intelligibility.safe_name(voice)}-dnsmos-scores.json"
        subprocess.run([sys.executable, str(DNSMOS), str(items), "--json", str(scores)], check=True,
                       stdout=subprocess.DEVNULL)
        rows = next(iter(json.loads(scores.read_text()).values()))
        r["p808"] = statistics.mean(x["p808"] for x in rows)


def measure(args: argparse.Namespace, workdir: Path) -> dict:
    r: dict = {"probes": [latency.probe_ms()], "ttfa": {}, "rtf": {}, "streams": {}}
    cpu_start = latency.cpu_times()
    # All the streams come from this one address: lift the per-address cap (16) above the climb.
    extra = ["--max-connections-per-ip", str(max(args.levels) + 4)]
    extra += ["--models-dir", str(args.models_dir)] if args.models_dir else []
    server = latency.ServerProcess(300, workdir / "server.log", *extra, *args.server_arg)
    r["command_server"] = server.command
    try:
        offered = {v["id"] for v in json.loads(server.http("/voices"))}
        missing = [v for v in args.voices if v not in offered]
        if missing:
            raise SystemExit(f"the server does not offer {', '.join(missing)}: see --help for af_heart")
        for voice in args.voices:  # load every model before anything is timed
            asyncio.run(latency.ttfa_runs(server.url, voice, latency.TEXTS["sentence"], 2))
        for voice in args.voices:
            for name, text in latency.TEXTS.items():
                runs = asyncio.run(latency.ttfa_runs(server.url, voice, text, args.repeats))
                bad = [s.reason for s in runs if s.reason != "done"]
                if bad:
                    raise RuntimeError(f"{voice}: {bad[0]}")
                r["ttfa"][(voice, name)] = [s.ttfa for s in runs]
                r["rtf"].setdefault(voice, []).extend(s.stats.get("rtf", float("nan")) for s in runs)
                print(f"  {voice:24} {name:9} TTFA p50 {latency.ms(latency.pct(r['ttfa'][(voice, name)], 50))}",
                      flush=True)
        for voice in args.voices:
            r["streams"][voice] = climb(server.url, voice, args.levels)
        r["probes"].append(latency.probe_ms())
        r["steal"] = latency.steal_share(cpu_start, latency.cpu_times())
        if args.quality:
            r["quality"] = quality(server.url, args.voices, english_sentences(workdir / "en.json"), workdir)
    finally:
        server.stop()
    if args.quality:
        dnsmos(r["quality"], workdir)
    return r


def report(r: dict, command: str) -> str:
    lines = [
        f"Command: `{command}` (server: `{r['command_server']}`); run "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Host speed probe (`latency.probe_ms`) "
        f"{r['probes'][0]:.0f} ms before, {r['probes'][1]:.0f} ms after the timing part; CPU stolen "
        f"{r['steal']:.0%}.",
        "",
        "| voice | WER (sentences) | DNSMOS P.808 | TTFA p50 / p95, one sentence | TTFA p50 / p95, paragraph "
        "| RTF (median) | concurrent streams, zero underruns |",
        "|---|---|---|---|---|---|---|",
    ]
    for voice, levels in r["streams"].items():
        q = r.get("quality", {}).get(voice, {})
        clean = [n for n, c in levels.items() if not sum(c["underruns"]) and not c["failed"]]
        best = max(clean) if clean else 0
        shown = f"{best}" + (" (all tested)" if best == max(levels) else f" ({max(levels)} underran)")
        t1, tp = r["ttfa"][(voice, "sentence")], r["ttfa"][(voice, "paragraph")]
        wer = f"{q['wer']:.3f} ({q['n']})" if q.get("wer") is not None else "–"
        mos = f"{q['p808']:.2f}" if "p808" in q else "–"
        rtf = statistics.median(x for x in r["rtf"][voice] if x == x)
        lines.append(f"| {voice} | {wer} | {mos} | {latency.ms(latency.pct(t1, 50))} / {latency.ms(latency.pct(t1, 95))} "
                     f"| {latency.ms(latency.pct(tp, 50))} / {latency.ms(latency.pct(tp, 95))} | {rtf:.3f} | {shown} |")
    lines += ["", "Sentence: \"" + latency.TEXTS["sentence"] + "\"; every concurrent stream speaks the paragraph "
              "and plays in real time from its first frame; an underrun is a frame arriving over "
              f"{latency.UNDERRUN_TOLERANCE_S * 1000:.0f} ms after the audio before it ran out."]
    return "\n".join(lines) + "\n"


def _str_keys(value: object) -> object:
    """JSON wants string keys; the results are keyed by (voice, text) and stream counts."""
    if isinstance(value, dict):
        return {" ".join(map(str, k)) if isinstance(k, tuple) else str(k): _str_keys(v) for k, v in value.items()}
    return value


def run(models_dir: Path | None, server_arg: list[str], write: bool, command: str, repeats: int = 10,
        levels: list[int] | None = None, quality: bool = True, json_path: Path | None = None) -> dict:
    args = argparse.Namespace(models_dir=models_dir, server_arg=server_arg, repeats=repeats,
                              levels=levels or list(LEVELS), quality=quality, voices=list(VOICES))
    with tempfile.TemporaryDirectory(prefix="rtts-english-") as tmp:
        results = measure(args, Path(tmp))
    section = report(results, command)
    print("\n" + section)
    if json_path is not None:  # every stream and run, for a closer look than the table
        json_path.write_text(json.dumps(_str_keys(results), default=str, indent=1))
    if write:
        latency.write_doc(section, BEGIN, END, "English voices (issue 12)")
        print(f"written to {latency.DOC.relative_to(ROOT)}")
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models-dir", type=Path, help="serve from this models directory (see above)")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=list(LEVELS))
    p.add_argument("--server-arg", action="append", default=[], metavar="ARG")
    p.add_argument("--no-quality", dest="quality", action="store_false", help="skip WER and DNSMOS")
    p.add_argument("--no-write", dest="write", action="store_false")
    p.add_argument("--json", type=Path, help="also write the raw results here")
    args = p.parse_args()
    command = "python3 benchmarks/english_voices.py" + ("" if not sys.argv[1:] else " " + " ".join(sys.argv[1:]))
    run(args.models_dir, args.server_arg, args.write, command, args.repeats, args.levels, args.quality, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
