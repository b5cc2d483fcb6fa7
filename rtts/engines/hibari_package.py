"""The ``hibari`` package imported in the inference process with numpy's FFT first, scipy's later.

Importing ``hibari`` imports its DSP (``hibari.dsp``), which takes ``scipy.fft`` where it
can be imported: "scipy.fft keeps float32 and is 3-5x faster than numpy's float64
pocketfft". Importing ``scipy.fft`` (it loads numpy's f2py, testing and ma modules and
scipy.special) is what a wake of the inference process waited for, for Hibari's first
English words and the student's first Mandarin ones. Since numpy 2.0 numpy's FFT (the
same pocketfft) computes float32 in float32 too, so the package is imported without
scipy, and ``hibari.dsp`` is made again with scipy's FFT a few seconds later, in a
thread at the lowest priority, once those first words are out. Measured on the 2-core
Xeon (numpy 2.4, scipy 1.17): the import 20 ms instead of 154 ms; ``dsp.synth`` over 3 s
of audio 7.6 ms with numpy's FFT, 5.5 ms with scipy's (Hibari's warm first audio was
6-8 ms later with numpy's for good, docs/benchmarks.md); the audio within 6e-8, under a
16-bit sample's step (tests/live/test_hibari_package.py).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import threading
import time

import numpy as np

from rtts.lean_imports import without

__all__ = ["SCIPY_AFTER_S", "import_hibari"]

logger = logging.getLogger(__name__)

# numpy before 2.0 transforms float32 in float64: hibari.dsp's reason for scipy then holds.
_FLOAT32_FFT = np.lib.NumpyVersion(np.__version__) >= "2.0.0"
# After a wake's first words (0.25-0.5 s on the 2-core box), with room to spare.
SCIPY_AFTER_S = 3.0


def import_hibari() -> None:
    """Import ``hibari`` (and ``hibari.dsp``) unless imported already; call before any
    ``from hibari import ...`` in the inference process. Raises ImportError as that would."""
    if "hibari" in sys.modules:
        return
    if not _FLOAT32_FFT:
        importlib.import_module("hibari")
        return
    with without("scipy.fft"):
        importlib.import_module("hibari")
    threading.Thread(target=_with_scipy_later, name="dsp-scipy", daemon=True).start()


def _with_scipy_later() -> None:
    time.sleep(SCIPY_AFTER_S)
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # Linux: this thread's own
    try:
        # hibari.dsp's own code, run again now that scipy.fft imports: the module keeps its
        # identity, and a call while it runs finds one FFT or the other, both whole.
        importlib.reload(sys.modules["hibari.dsp"])
    except Exception as exc:  # a broken scipy: numpy's FFT goes on serving
        logger.warning("Hibari's DSP keeps numpy's FFT: %s", exc)
