"""Hibari "heart" (the ``hibari-tts`` package) as an engine.

Hibari is a small ONNX network distilled from Kokoro-82M's af_heart: phoneme ids in,
five spectra per 12.5 ms frame (and an F0 curve) out, which ``hibari.dsp`` turns into
24 kHz audio (a pulse train from F0 filtered by the predicted spectra, shaped noise and
a free-phase part, then an overlap-add inverse STFT, n_fft 1200, hop 300).

``hibari.dsp.synth`` does that for a whole unit at once. ``Windows`` runs the same
steps over windows of frames so the first audio of a unit leaves after one window:
the pulse train is made once per unit (``dsp.pulses``: its phase is then continuous
across windows by construction, and it costs ~0.3 ms per second of audio), and each
window takes its STFT frames from that train, adds its own noise and overlap-adds
into the tail the window before left. Output equals the one-shot ``dsp.synth`` to
float32 rounding when both draw the same noise (tests/test_hibari.py measures it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

__all__ = ["Windows"]

# Frames per window: the first small so the first audio leaves early, the later ones
# larger (fewer numpy calls per second of audio).
FIRST_WINDOW = 12
LATER_WINDOW = 64

# noise(start, stop) -> complex64 [601, stop - start]: the noise of those frames.
Noise = Callable[[int, int], np.ndarray]


def rng_noise(rng: np.random.Generator, bins: int) -> Noise:
    """Fresh complex Gaussian noise for each window, as ``dsp.synth`` draws for a whole unit."""

    def noise(start: int, stop: int) -> np.ndarray:
        return rng.standard_normal((bins, 2 * (stop - start)), dtype=np.float32).view(np.complex64)

    return noise


class Windows:
    """``hibari.dsp.synth`` over windows of frames: ``take(n)`` returns the audio that
    is final once ``n`` more frames are done (two frames later than their own: an output
    hop overlaps the next two frames' windows); the last call returns the tail."""

    def __init__(self, outputs: list[np.ndarray], noise: Noise) -> None:
        from hibari import dsp  # the inference process only: it brings scipy.fft

        self._dsp = dsp
        self._lh, self._th, self._ln, self._lr, self._phi, f0 = outputs
        self.frames = self._lh.shape[1]
        self._noise = noise
        half = dsp.N_FFT // 2
        # The whole unit's pulse train, padded as torch.stft(center=True) pads it.
        self._source = np.pad(dsp.pulses(f0), half, mode="reflect")
        self._norm = dsp._ola_norm(self.frames)  # tapered at both ends of the unit
        self._overlap = dsp.N_FFT // dsp.HOP - 1  # hops a frame reaches past its own
        self._acc = np.zeros((self._overlap, dsp.HOP), np.float32)  # the OLA tail
        self._done = 0  # frames synthesized
        self._out = 0  # OLA hops handed out (the first two are the centring pad)

    @property
    def finished(self) -> bool:
        return self._done >= self.frames

    def take(self, count: int) -> np.ndarray:
        dsp, a = self._dsp, self._done
        b = min(self.frames, a + count)
        hop, n_fft = dsp.HOP, dsp.N_FFT
        src = np.lib.stride_tricks.sliding_window_view(self._source[a * hop : (b - 1) * hop + n_fft], n_fft)
        spec = np.ascontiguousarray(dsp.rfft(src[::hop] * dsp.WIN_SRC, 1).T)  # [bins, b - a]
        rot = np.empty(spec.shape, np.complex64)
        c = np.tanh(self._th[:, a:b])
        c *= np.pi
        np.cos(c, out=rot.real)
        np.sin(c, out=rot.imag)
        rot *= dsp.ex(self._lh[:, a:b])
        spec *= rot
        z = self._noise(a, b)
        z *= dsp.ex(self._ln[:, a:b])
        spec += z
        np.cos(self._phi[:, a:b], out=rot.real)
        np.sin(self._phi[:, a:b], out=rot.imag)
        rot *= dsp.ex(self._lr[:, a:b])
        spec += rot
        frames = dsp.irfft(spec.T, n_fft, 1)
        frames *= dsp.WIN
        frames = frames.reshape(b - a, self._overlap + 1, hop)
        acc = np.zeros((b - a + self._overlap, hop), np.float32)
        acc[: self._overlap] = self._acc
        for k in range(self._overlap + 1):
            acc[k : k + b - a] += frames[:, k]
        self._done = b
        # Hops [a, b) are complete now; the last unit's hops past b only at the end.
        ready = b - a + (self._overlap if self.finished else 0)
        self._acc = acc[b - a :].copy()
        hops = acc[:ready] * self._norm[a : a + ready]
        first = max(0, 2 - a)  # the centring pad: dsp.ola drops n_fft/2 samples
        last = min(ready, self.frames + 2 - a)  # and keeps frames * hop samples
        return hops[first:last].reshape(-1)

    def __iter__(self) -> Iterator[np.ndarray]:
        count = FIRST_WINDOW
        while not self.finished:
            yield self.take(count)
            count = LATER_WINDOW
