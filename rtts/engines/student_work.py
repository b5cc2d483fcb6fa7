"""Kokoro's student in the inference process: its joined decoder and Hibari's DSP.

The engine's side, the join and the choice of generator, is ``kokoro_student``. This
module is what the inference process imports for the student's requests, apart from it
so that a process that has just woken imports only numpy and its own errors here, not
the cutting code and the engine seam (26 ms of a wake's path, 2-core Xeon).
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import numpy as np

from rtts.engines.hibari_package import import_hibari
from rtts.engines.kokoro_tensors import ENERGY, F0, FEATURES
from rtts.host.errors import EngineError

__all__ = ["NOISE_SEED", "OUTPUTS", "Spec", "StudentWork"]

OUTPUTS = ("lh", "th", "ln", "lr", "phi")  # the student's five spectra, in hibari.dsp.synth's order
# The noise branch's generator is seeded per run: the same unit gives the same audio
# (with and without word timing, on a retry), as the teacher's does.
NOISE_SEED = 20261202

# (joined decoder path, threads, cache dir or None): sent with every run, so that a
# restarted inference process opens the model again by itself.
Spec = tuple[str, int, "str | None"]


def _import_dsp() -> None:
    # If it cannot be imported, the first run imports it again and says why (EngineError).
    with contextlib.suppress(ImportError):
        import_hibari()


class StudentWork:
    """The joined decoder and the DSP, in the inference process (one per process)."""

    def __init__(self) -> None:
        self.session: Any = None
        self.path: str | None = None
        self._dsp: threading.Thread | None = None

    def prepare(self) -> None:
        """Begin the DSP's import (``hibari_package``) in a thread and return: the
        engine's load asks for it first, so that it runs beside the predictor's session
        and is done before the student's graph opens and its first run; begun with the
        graph, it had both wait for it on a 2-core box."""
        if self._dsp is None:
            self._dsp = threading.Thread(target=_import_dsp, name="dsp-import", daemon=True)
            self._dsp.start()

    def open(self, spec: Spec) -> None:
        """Open the joined decoder now (the engine's load does, so that what it holds counts
        in the memory budget's figure for Kokoro; a run opens it too, after a restart)."""
        from rtts.host.sessions import open_session

        path, threads, cache_dir = spec
        if self.session is None or self.path != path:
            self.prepare()  # a run after a restart comes here without the load's request
            self.session = open_session(Path(path), threads, "Kokoro student", None if cache_dir is None else Path(cache_dir))
            self.path = path

    def run(self, spec: Spec, features: np.ndarray, f0: np.ndarray, energy: np.ndarray, style: np.ndarray) -> np.ndarray:
        """A unit's audio (float32, 300 samples a frame of ``f0``) from the decoder's inputs."""
        import_hibari()
        from hibari import dsp

        from rtts.host.sessions import run_options

        self.open(spec)
        feeds = {FEATURES: features, F0: f0, ENERGY: energy, "style": style}
        parts = [np.asarray(p[0], np.float32) for p in self.session.run(list(OUTPUTS), feeds, run_options())]
        curve = np.asarray(f0, np.float32).reshape(-1)
        if parts[0].shape[1] != curve.size:
            raise EngineError(f"Kokoro student: {parts[0].shape[1]} frames for an F0 of {curve.size}")
        return dsp.synth(*parts, curve, np.random.default_rng(NOISE_SEED))

    def unload(self) -> None:
        self.session = self.path = None
