#!/usr/bin/env python3
"""Which English front end Hibari should read through: its own, or rtts's normalizer first.

    WHISPER_DIR=$HOME/.cache/whisper-base python benchmarks/hibari_text.py

Speaks every English sentence of the public set and of ``benchmarks/sentences/en*.json``
with the ``hibari-tts`` package (same noise seed for every path), through

* ``hibari``: Hibari's own normalizer and G2P (what the package does by itself);
* ``rtts+hibari``: ``rtts.text.normalize_en`` first, then Hibari's normalizer and G2P;
* ``rtts``: ``normalize_en`` first, then Hibari's G2P with its own normalizer off,

then scores all WAVs with the shared ``asr_score.py`` (Whisper base) in one go and prints
the word error rate per path and sentence set, and each sentence the paths disagree on.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from intelligibility import DEFAULT_SCORER, LOCAL_SENTENCES, PUBLIC_SENTENCES, load_sentences, write_wav  # noqa: E402

from rtts.text.normalize_en import normalize_en  # noqa: E402


def front_ends(g2p):  # type: ignore[no-untyped-def]
    return {
        "hibari": lambda text: g2p(text),
        "rtts+hibari": lambda text: g2p(normalize_en(text)),
        "rtts": lambda text: g2p(normalize_en(text), normalize_text=False),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "rtts-hibari-text")
    p.add_argument("--scorer", type=Path, default=DEFAULT_SCORER)
    args = p.parse_args()
    from hibari import Hibari

    tts = Hibari()
    sets = {"public": PUBLIC_SENTENCES, **{f.stem: f for f in sorted(LOCAL_SENTENCES.glob("en*.json"))}}
    args.out.mkdir(parents=True, exist_ok=True)
    items, rows = [], []
    for set_name, path in sets.items():
        for n, sentence in enumerate(s for s in load_sentences(path) if s.langs == ("en",)):
            for path_name, phonemize in front_ends(tts.g2p).items():
                phonemes = phonemize(sentence.text)
                audio = tts.from_phonemes(phonemes, seed=n)
                wav = args.out / f"{set_name}-{n:02d}-{path_name}.wav"
                write_wav(wav, (np.clip(audio, -1, 1) * 32767).astype(np.int16), tts.sample_rate)
                items.append({"lang": "en", "text": sentence.ref or sentence.text, "wav": str(wav)})
                rows.append((set_name, n, path_name, sentence.text, phonemes))
    (args.out / "items.json").write_text(json.dumps(items, ensure_ascii=False, indent=1))
    env = {**os.environ, "WHISPER_DIR": os.environ.get("WHISPER_DIR", str(Path.home() / ".cache/whisper-base"))}
    run = subprocess.run([sys.executable, str(args.scorer), str(args.out / "items.json")],
                         capture_output=True, text=True, env=env, check=True)
    lines = [line for line in run.stdout.splitlines() if line.startswith("en ")]
    if len(lines) != len(rows):
        print(run.stdout, run.stderr, file=sys.stderr)
        return 2
    errors: dict[tuple[str, str], list[float]] = {}
    by_sentence: dict[tuple[str, int], dict[str, str]] = {}
    for (set_name, n, path_name, text, phonemes), line in zip(rows, lines):
        wer = float(line.split()[1])
        errors.setdefault((set_name, path_name), []).append(wer)
        by_sentence.setdefault((set_name, n), {})[path_name] = f"{wer:.2f} {line.split(' | ')[-1]}"
    paths = list(front_ends(None))
    print("| sentences | " + " | ".join(paths) + " |\n|---|" + "---|" * len(paths))
    for set_name in sets:
        n = len(errors[(set_name, paths[0])])
        cells = " | ".join(f"{np.mean(errors[(set_name, q)]):.3f}" for q in paths)
        print(f"| {set_name} ({n}) | {cells} |")
    cells = " | ".join(f"{np.mean([e for (s, q), v in errors.items() if q == path for e in v]):.3f}" for path in paths)
    print(f"| all | {cells} |\n")
    for (set_name, n), heard in by_sentence.items():
        if len({h.split()[0] for h in heard.values()}) > 1:
            print(f"{set_name} {n}: " + "  /  ".join(f"{q}: {h}" for q, h in heard.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
