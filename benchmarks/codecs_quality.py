#!/usr/bin/env python3
"""What the lossy formats do to the speech: intelligibility (Whisper) and artifacts (DNSMOS).

    python3 benchmarks/codecs_quality.py --out /tmp/rtts-codecs-quality

It starts ``python3 -m rtts serve``, fetches each public sentence of
``../shared/tools/sentences-public.json`` (en with Piper joe, zh with Kokoro jm_kumo, ja
with Kokoro jf_alpha) once as ``pcm`` from ``POST /v1/audio/speech``, then puts that very
audio through the encoders rtts streams (``rtts.sound.codecs``: Ogg Opus 24 kbit/s, mp3
48 kbit/s, AAC 48 kbit/s; and the WebSocket's raw Opus packets, 20 ms) and FFmpeg's
decoders, so the only difference between the rows is the codec. Every version is scored
by ``asr_score.py`` (WER/CER) and ``dnsmos_score.py`` (P.808), run with this interpreter
unless ``--scorer-python`` says otherwise.
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from latency import ServerProcess  # noqa: E402

from rtts.sound import audio, codecs  # noqa: E402

TOOLS = ROOT.parent / "shared" / "tools"
VOICES = {"en": "piper/en_US-joe-medium", "zh": "kokoro/jm_kumo", "ja": "kokoro/jf_alpha"}
VERSIONS = ("pcm", "opus", "opus-packets", "mp3", "aac")


def fetch_pcm(port: int, text: str, voice: str) -> np.ndarray:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", "/v1/audio/speech", json.dumps({"input": text, "voice": voice, "response_format": "pcm"}),
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    assert r.status == 200, data[:200]
    return audio.decode(data, "pcm16")


def decode_container(data: bytes) -> np.ndarray:
    import av

    with av.open(io.BytesIO(data)) as f:
        frames = list(f.decode(audio=0))
    rate = frames[0].sample_rate
    x = np.concatenate([fr.to_ndarray().reshape(len(fr.layout.channels), -1)[0] for fr in frames]).astype(np.float32)
    if rate == 24000:
        return x
    down = audio.Resampler(rate, 24000)
    return np.concatenate([down.process(x), down.flush()])


def through(version: str, x: np.ndarray) -> np.ndarray:
    """``x`` (24 kHz) encoded as rtts streams it and decoded by FFmpeg."""
    if version == "pcm":
        return x
    if version == "opus-packets":
        import av

        enc = codecs.OpusPackets(24000, 480)
        framer = audio.Framer(480)
        packets = [enc.encode(f) for f in framer.push(x)] + enc.finish(framer.flush())
        dec = av.CodecContext.create("libopus", "r")
        dec.extradata = enc.head
        # FFmpeg's libopus decoder gives int16 at 48 kHz.
        y = np.concatenate([f.to_ndarray().reshape(-1) for p in packets for f in dec.decode(av.Packet(p))])
        y = y.astype(np.float32) / 32768 if y.dtype == np.int16 else y.astype(np.float32)
        down = audio.Resampler(48000, 24000)
        return np.concatenate([down.process(y), down.flush()])[: len(x)]
    enc = codecs.stream_encoder(version, 24000)
    data = b"".join(enc.push(x[i : i + 480]) for i in range(0, len(x), 480)) + enc.finish()
    return decode_container(data)


def run_scorer(python: str, script: Path, items: Path) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.setdefault("WHISPER_DIR", str(Path.home() / ".cache" / "whisper-base"))
    return subprocess.run([python, str(script), str(items)], capture_output=True, text=True, env=env, check=True).stdout


def synthesize(sentences: dict[str, list[str]]) -> list[tuple[str, str, np.ndarray]]:
    """Each public sentence once, as pcm from a server of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(0, Path(tmp) / "server.log", "--log-level", "warning")
        try:
            return [(lang, text, fetch_pcm(server.port, text, VOICES[lang])) for lang in VOICES for text in sentences[lang]]
        finally:
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/rtts-codecs-quality"))
    parser.add_argument("--scorer-python", default=sys.executable)
    parser.add_argument("--versions", default=",".join(VERSIONS), help="which of " + ", ".join(VERSIONS))
    parser.add_argument("--reuse", action="store_true",
                        help="take the speech from the pcm WAVs of an earlier run in --out instead of a server")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.reuse:
        reused = json.loads((args.out / "items-pcm.json").read_text())
        speech = [(it["lang"], it["text"], audio.read_wav(it["wav"])[0]) for it in reused]
    else:
        speech = synthesize(json.loads((TOOLS / "sentences-public.json").read_text()))
    rows = {}
    for version in args.versions.split(","):
        items = []
        for i, (lang, text, x) in enumerate(speech):
            wav = args.out / f"{lang}_{version}_{i:02d}.wav"
            wav.write_bytes(audio.wav_bytes(through(version, x), 24000))
            items.append({"lang": lang, "text": text, "wav": str(wav)})
        items_path = args.out / f"items-{version}.json"
        items_path.write_text(json.dumps(items, ensure_ascii=False, indent=1))
        asr = run_scorer(args.scorer_python, TOOLS / "asr_score.py", items_path)
        mos = run_scorer(args.scorer_python, TOOLS / "dnsmos_score.py", items_path)
        errors = dict(re.findall(r"^MEAN (\w+) \w+ ([\d.]+)", asr, re.M))
        p808 = re.search(r"ALL p808\s+n=\d+ mean=([\d.]+)", mos)
        rows[version] = (errors, p808.group(1) if p808 else "?")
    langs = list(VOICES)
    print("| version | " + " | ".join(f"{lang} {'WER' if lang == 'en' else 'CER'}" for lang in langs) + " | P.808 |")
    print("|---|" + "---|" * (len(langs) + 1))
    for version, (errors, p808) in rows.items():
        print(f"| {version} | " + " | ".join(errors.get(lang, "?") for lang in langs) + f" | {p808} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
