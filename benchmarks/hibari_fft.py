#!/usr/bin/env python3
"""Hibari's DSP windows with numpy's FFT against scipy's (rtts/engines/hibari_package.py).

    python3 benchmarks/hibari_fft.py [--rounds 3] [--repeats 60]

The inference process imports ``hibari`` with numpy's FFT (scipy's import was ~150 ms of
every wake). This runs Hibari's model once over an English sentence and then its DSP
in the windows the engine takes (``Windows``: the first of 40 frames, then 64), in one
fresh process per FFT, the two taking turns round by round, and prints the p50 of the
import of ``hibari`` (one a round), of the first window and of the whole unit. The host probe of latency.py and the CPU model are
printed before and after.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import latency  # noqa: E402  (probe_ms, cpu_model)

ROOT = Path(__file__).resolve().parent.parent
TEXT = "The morning train to Boston leaves from platform four at ten thirty."

ONE = """
import json, sys, time
from pathlib import Path
import numpy as np
import onnxruntime
t0 = time.perf_counter()
if sys.argv[1] == "numpy":
    from rtts.engines.hibari_package import import_hibari
    import_hibari()
import hibari
imported = time.perf_counter() - t0
from hibari import dsp
import onnxruntime as ort
from rtts.engines.hibari import _SPECTRA, Windows, _g2p, rng_noise
assets = Path(hibari.__file__).parent / "assets"
vocab = json.loads((assets / "vocab.json").read_text())
session = ort.InferenceSession(str(assets / "hibari.onnx"), providers=["CPUExecutionProvider"])
ids = [vocab[c] for c in _g2p(None)(sys.argv[2]) if c in vocab]
outputs = session.run(None, {"ids": np.asarray([ids], np.int64), "speed": np.asarray([1.0], np.float32)})
spectra = [np.asarray(o[0]) for o in outputs[:_SPECTRA]]
rng = np.random.default_rng(0)
first, whole = [], []
for _ in range(int(sys.argv[3])):
    windows = Windows(spectra, rng_noise(rng, spectra[0].shape[0]))
    t0 = time.perf_counter()
    windows.take(40)
    t1 = time.perf_counter()
    left = spectra[0].shape[1] - 40
    while left > 0:
        windows.take(min(64, left))
        left -= 64
    first.append(t1 - t0)
    whole.append(time.perf_counter() - t0)
print(json.dumps({"fft": dsp.FFT_BACKEND, "frames": int(spectra[0].shape[1]), "first": first, "whole": whole,
                  "import": [imported]}))
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=60)
    args = p.parse_args()
    print(f"CPU: {latency.cpu_model()}; host probe {latency.probe_ms():.0f} ms", flush=True)
    got: dict[str, dict[str, list[float]]] = {}
    frames = 0
    for _ in range(args.rounds):
        for fft in ("numpy", "scipy"):
            out = subprocess.run([sys.executable, "-c", ONE, fft, TEXT, str(args.repeats)], cwd=ROOT,
                                 capture_output=True, text=True, check=True, timeout=300)
            run = json.loads(out.stdout.splitlines()[-1])
            assert run["fft"] == fft, run["fft"]
            frames = run["frames"]
            for key in ("first", "whole", "import"):
                got.setdefault(fft, {}).setdefault(key, []).extend(run[key])
    print(f"host probe {latency.probe_ms():.0f} ms after; {args.rounds} rounds of {args.repeats} per FFT; "
          f"a unit of {frames} frames ({frames * 300 / 24000:.2f} s of audio)\n")
    print("| FFT | importing hibari (numpy and ONNX Runtime imported first), p50 | first window (40 frames), p50 | whole unit, p50 |")
    print("|---|---|---|---|")
    for fft, times in got.items():
        cells = [statistics.median(times[key]) * 1000 for key in ("import", "first", "whole")]
        print(f"| {fft} | " + " | ".join(f"{ms:.2f} ms" for ms in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
