#!/usr/bin/env python3
"""What listeners hear when the first unit is cut shorter: ASR error and DNSMOS, two builds.

    python3 benchmarks/first_unit_quality.py --before DIR [--langs zh,ja,fr,pt,en] [--voices default] [--out DIR]

Starts this checkout's server and ``--before``'s (latency.ServerProcess, phrase cache
off), and for each speaks the public sentences (../shared/tools/sentences-public.json)
and this repository's own (benchmarks/sentences) with **no voice named**, the path users
take (or with ``--voices``, e.g. kokoro/af_heart for English, whose default is Hibari),
through benchmarks/intelligibility.py (which checks every stream's seq and pts and runs
../shared/tools/asr_score.py), then rates every WAV with ../shared/tools/dnsmos_score.py. Both scorers run in ``--scorer-python``'s venv
(setup: ../shared/tools/README.md). The speech is made with nothing else on the
inference thread, so each utterance's first unit is spoken as a waiting listener gets it.
Prints one table: per language and sentence set, error (WER, or CER for zh/ja) and P.808
for each build.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import latency  # noqa: E402  (ServerProcess)

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT.parent / "shared" / "tools"
SETS = {"public": TOOLS / "sentences-public.json", "own": ROOT / "benchmarks" / "sentences"}


def speak_and_score(url: str, sentences: Path, langs: str, out: Path, python: Path, voices: str) -> dict:
    """{lang: (error, n)} from intelligibility.py, and {lang: P.808 mean} from DNSMOS."""
    results = out / "results.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "intelligibility.py"), "--url", url,
                    "--voices", voices, "--langs", langs, "--sentences", str(sentences), "--out", str(out),
                    "--json", str(results), "--scorer-python", str(python), "--timeout", "300"], check=True)
    means = json.loads(results.read_text())["scorer"]["means_all_voices"]
    dnsmos = out / "dnsmos.json"
    subprocess.run([str(python), str(TOOLS / "dnsmos_score.py"), str(out / "items.json"), "--json", str(dnsmos)],
                   check=True, capture_output=True)
    per_lang: dict[str, list[float]] = {}
    for row in next(iter(json.loads(dnsmos.read_text()).values())):
        per_lang.setdefault(row["lang"], []).append(row["p808"])
    return {"error": means, "p808": {k: sum(v) / len(v) for k, v in per_lang.items()}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", type=Path, required=True, help="a checkout of the previous build")
    p.add_argument("--langs", default="zh,ja,fr,pt,en")
    p.add_argument("--voices", default="default", help="default (no voice named), or voice ids")
    p.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="rtts-first-unit-")))
    p.add_argument("--scorer-python", type=Path, default=Path("/work/score-venv/bin/python"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    builds = {"this build": ROOT, "before": args.before.resolve()}
    table: dict = {}
    for name, root in builds.items():
        latency.ROOT = root
        server = latency.ServerProcess(600, args.out / f"{name.replace(' ', '-')}.log")
        try:
            for set_name, path in SETS.items():
                out = args.out / name.replace(" ", "-") / set_name
                table[(name, set_name)] = speak_and_score(server.url, path, args.langs, out, args.scorer_python, args.voices)
        finally:
            server.stop()
    print(f"\nWAVs, transcripts and scores in {args.out}\n")
    print("| set | lang | " + " | ".join(f"{b}: error, P.808" for b in builds) + " |")
    print("|---|---|" + "---|" * len(builds))
    for set_name in SETS:
        for lang in args.langs.split(","):
            cells = []
            for b in builds:
                r = table[(b, set_name)]
                err, mos = r["error"].get(lang), r["p808"].get(lang)
                cells.append(f"{err:.3f}, {mos:.3f}" if err is not None and mos is not None else "—")
            print(f"| {set_name} | {lang} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
