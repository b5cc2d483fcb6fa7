"""The ``hibari`` package imported in the inference process with numpy's FFT, not scipy's.

Importing ``hibari`` imports its DSP (``hibari.dsp``), which takes ``scipy.fft`` where it
can be imported: "scipy.fft keeps float32 and is 3-5x faster than numpy's float64
pocketfft". Since numpy 2.0 numpy's FFT (the same pocketfft) computes float32 in float32
too, and importing ``scipy.fft`` (which loads numpy's f2py, testing and ma modules and
scipy.special) is what a wake of the inference process waited for, for the student's
first Mandarin words and Hibari's first English ones. Measured on the 2-core Xeon
(numpy 2.4, scipy 1.17; ``benchmarks/hibari_fft.py``): the import 20 ms instead of 151
ms; Hibari's first window 1.04 ms instead of 0.95, a 4.35 s unit's windows 8.6 ms instead
of 7.6 (+0.02 % of real time); the audio within 6e-8, under a 16-bit sample's step
(tests/live/test_hibari_package.py).

Taking scipy's FFT back a few seconds later (``hibari.dsp`` reloaded in a thread) was
tried and dropped: a process's first requests and its later ones then differed in their
last bit, and the same unit is meant to give the same audio (the live tests compare
requests byte for byte), for 0.09 ms a window.
"""

from __future__ import annotations

import contextlib
import importlib
import sys

import numpy as np

from rtts.lean_imports import without

__all__ = ["import_hibari"]

# numpy before 2.0 transforms float32 in float64: hibari.dsp's reason for scipy then holds.
_FLOAT32_FFT = np.lib.NumpyVersion(np.__version__) >= "2.0.0"


def import_hibari() -> None:
    """Import ``hibari`` (and ``hibari.dsp``) unless imported already; call before any
    ``from hibari import ...`` in the inference process. Raises ImportError as that would."""
    if "hibari" in sys.modules:
        return
    with without("scipy.fft") if _FLOAT32_FFT else contextlib.nullcontext():
        importlib.import_module("hibari")
