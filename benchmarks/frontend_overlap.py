#!/usr/bin/env python3
"""Does loading the Mandarin front end beside the Kokoro model save time? (issue 10)

    python3 benchmarks/frontend_overlap.py [--runs 3] [--cache-dir ~/.cache/rtts]

Each run is a fresh Python process (as the inference process is after a start or an
idle unload) that loads the Mandarin front end (misaki's ZHG2P, jieba's dictionary)
and Kokoro's two sessions (predictor and decoder, from the optimized graphs a server
has kept in the cache dir), either one after the other or the front end in a thread
while the sessions load, which is what the server now does on a cold connection
(``KokoroKind.warm_up`` at ``Service.acquire``, the model loaded before phonemizing).
ONNX Runtime builds sessions outside the GIL, so the two overlap. Serial and
overlapped runs alternate; the host probe of ``latency.py`` is printed before and after.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import latency  # noqa: E402  (probe_ms)

CHILD = r"""
import sys, threading, time
from pathlib import Path
t0 = time.perf_counter()
import onnxruntime as ort

def sessions():
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # already optimized
    for path in sys.argv[2:]:
        ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])

def front_end():
    import jieba
    from misaki.zh import ZHG2P
    jieba.setLogLevel(60)
    ZHG2P()("你好")  # the first call loads jieba's dictionary

if sys.argv[1] == "serial":
    front_end()
    sessions()
else:
    thread = threading.Thread(target=front_end)
    thread.start()
    sessions()
    thread.join()
print(time.perf_counter() - t0)
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "rtts")
    args = p.parse_args()
    found = args.cache_dir / "ort-optimized"
    # The newest optimized predictor and decoder (older builds' cuts may still be there).
    graphs = [
        str(max(found.glob(f"kokoro-*.{part}-*.onnx"), key=lambda g: g.stat().st_mtime, default=""))
        for part in ("predictor", "decoder")
    ]
    if not all(graphs):
        print(f"need Kokoro's predictor and decoder in {args.cache_dir}/ort-optimized (run a server once)", file=sys.stderr)
        return 2
    probe0 = latency.probe_ms()
    times: dict[str, list[float]] = {"serial": [], "overlapped": []}
    for _ in range(args.runs):
        for mode in times:
            out = subprocess.run([sys.executable, "-c", CHILD, mode, *graphs], capture_output=True, text=True, check=True)
            times[mode].append(float(out.stdout.split()[-1]))
    probe1 = latency.probe_ms()
    print(f"host probe {probe0:.0f} ms before, {probe1:.0f} ms after (a quiet host: about 35 ms)")
    print("| load | median (min–max), fresh process, onnxruntime import included |")
    print("|---|---|")
    for mode, values in times.items():
        print(f"| {mode} | {statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
