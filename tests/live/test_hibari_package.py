"""``rtts.engines.hibari_package``: the inference process imports ``hibari`` with numpy's
FFT, without ``scipy.fft``, and Hibari's DSP then gives the audio scipy's FFT gives, to
within a 16-bit sample's step (in tests/live: it loads Hibari and scipy in a fresh process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CODE = """
import sys
import numpy as np
from rtts.engines.hibari_package import import_hibari
import_hibari()
from hibari import dsp
print(dsp.FFT_BACKEND, "scipy.fft" in sys.modules)
rng = np.random.default_rng(31)
frames = 400  # 5 s
bins = dsp.N_FFT // 2 + 1
parts = [rng.normal(-1.0, 1.5, (bins, frames)).astype(np.float32) for _ in range(3)]
th, phi = (rng.normal(0, 2, (bins, frames)).astype(np.float32) for _ in range(2))
f0 = (110 + 60 * np.sin(np.arange(frames) / 17)).astype(np.float32)
f0[rng.random(frames) < 0.3] = 0  # unvoiced frames
ours = dsp.synth(parts[0], th, parts[1], parts[2], phi, f0, np.random.default_rng(1))
import scipy.fft as sf
dsp.rfft = lambda x, axis: sf.rfft(x, axis=axis, overwrite_x=True)
dsp.irfft = lambda x, n, axis: sf.irfft(x, n=n, axis=axis)
theirs = dsp.synth(parts[0], th, parts[1], parts[2], phi, f0, np.random.default_rng(1))
pcm = lambda y: np.clip(np.round(y * 32767), -32768, 32767).astype(np.int32)
print(ours.dtype, ours.shape == theirs.shape, float(np.abs(theirs).max()) > 0.05)
print(float(np.abs(ours - theirs).max()) < 1e-6, int(np.abs(pcm(ours) - pcm(theirs)).max()) <= 1)
"""


def test_hibari_imports_with_numpys_fft_and_speaks_as_with_scipys() -> None:
    done = subprocess.run([sys.executable, "-c", CODE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["numpy False", "float32 True True", "True True"]
