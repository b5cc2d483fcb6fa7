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

import importlib.util
import logging
import math
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np

from rtts.engines import ort
from rtts.engines.base import AddVoice, Costs, Engine, EngineContext, EngineError, VoiceInfo
from rtts.engines.trim import trim_silence
from rtts.g2p.split import split_phonemes
from rtts.text.lexicon import split_phonemes as split_lexicon
from rtts.text.normalize_en import normalize_en

__all__ = ["HIBARI", "HibariEngine", "Windows"]

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24000
VOICE = "heart"  # the one voice inside the package; the others are downloaded, out of reach here
# Hibari's own limit per model run (hibari.tts.MAX_PHONEMES): longer units are cut at a break.
MAX_PHONEMES = 400
# Frames per window (12.5 ms each). A unit starts with ~0.3 s of silence (the model's
# pads), so the first window reaches past it to the first sound; later windows are
# larger (fewer numpy calls per second of audio), and the last one takes the ~0.45 s
# of trailing silence whole so that it can be trimmed in one piece.
FIRST_WINDOW = 40
LATER_WINDOW = 64
LAST_WINDOW = 48

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

    def sizes(self, first: int) -> Iterator[int]:
        """Window sizes for the whole unit: ``first``, then LATER_WINDOW, the last one
        stretched to hold at least LAST_WINDOW frames."""
        done, count = 0, first
        while done < self.frames:
            if self.frames - (done + count) < LAST_WINDOW:
                count = self.frames - done
            yield count
            done += count
            count = LATER_WINDOW


class HibariEngine:
    """The "heart" voice: Hibari's model in the inference process, its G2P and DSP here.

    Text goes through rtts's English normalizer, then Hibari's own normalizer and G2P
    (``benchmarks/hibari_text.py``: WER 0.051 against 0.066 for Hibari's front end
    alone on 42 sentences); lexicon phonemes (misaki's alphabet, as Kokoro's) pass as
    written. Each unit runs the model once, then the DSP in ``Windows``.
    """

    key = "hibari"
    sample_rate = SAMPLE_RATE

    def __init__(self, model: Path, threads: int, cache_dir: Path | None = None) -> None:
        self.model = model  # hibari/assets/hibari.onnx; its G2P's files sit beside it
        self._threads = threads
        self._cache_dir = cache_dir
        self._session: ort.RemoteSession | None = None
        self._g2p: Callable[[str], str] | None = None
        self._vocab: dict[str, int] = {}
        self._rng = np.random.default_rng()

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def load(self) -> None:
        if self._session is not None:
            return
        import json

        from hibari.g2p import G2P
        from hibari.g2p.oov import OOV

        assets = self.model.parent
        try:
            vocab = json.loads((assets / "vocab.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise EngineError(f"cannot read Hibari's vocabulary: {exc}") from exc
        session = ort.create_session(self.model, self._threads, "hibari", self._cache_dir)
        # Words its lexicons lack are read by a small ONNX model: it runs in the
        # inference process too (OOV takes any object with ``run``).
        oov = OOV(str(assets / "oov.onnx"), session=ort.create_session(assets / "oov.onnx", 1, "hibari-oov"))
        self._g2p, self._vocab, self._session = G2P(oov=oov), vocab, session

    def unload(self) -> None:
        if self._session is None:
            return
        self._session = self._g2p = None
        ort.release_memory()

    def phonemize(self, text: str) -> str:
        """Hibari's phonemes for ``text``, symbols its model does not know dropped."""
        self.load()
        g2p = self._g2p
        if g2p is None:
            raise EngineError("Hibari was unloaded during synthesis")
        pieces = (piece if is_phonemes else g2p(normalize_en(piece)) for is_phonemes, piece in split_lexicon(text))
        phonemes = " ".join(p.strip() for p in pieces if p.strip())
        return "".join(ch for ch in phonemes if ch in self._vocab)

    def synthesize(
        self, text: str, voice: VoiceInfo, lang: str, speed: float, lead_s: float = 0.0
    ) -> Iterator[np.ndarray]:
        """See ``Engine.synthesize``. A listener who already holds a second of audio gets
        larger windows (fewer, cheaper per second); one who waits, the first sound early."""
        if not (math.isfinite(speed) and speed > 0):
            raise ValueError(f"speed must be a positive number, not {speed!r}")
        if lang != "en":
            raise ValueError(f"Hibari speaks en only, not {lang!r}")
        phonemes = self.phonemize(text)
        return self._generate(phonemes, speed, FIRST_WINDOW if lead_s < 1.0 else LATER_WINDOW)

    def _generate(self, phonemes: str, speed: float, first: int) -> Iterator[np.ndarray]:
        for piece in split_phonemes(phonemes, MAX_PHONEMES):
            outputs = self._run([0, *(self._vocab[ch] for ch in piece), 0], speed)
            windows = Windows(outputs, rng_noise(self._rng, outputs[0].shape[0]))
            sizes = list(windows.sizes(first))
            started = False
            for n, count in enumerate(sizes):
                audio = windows.take(count)
                last = n == len(sizes) - 1
                # The model's pads are silence: cut it before the first sound and after the
                # last (a silent pause between words is kept as it is).
                if not started or last:
                    audio = trim_silence(audio, SAMPLE_RATE, start=not started, end=last)
                if audio.size:
                    started = True
                    yield np.clip(audio, -1.0, 1.0)

    def _run(self, ids: list[int], speed: float) -> list[np.ndarray]:
        session = self._session
        if session is None:
            raise EngineError("Hibari was unloaded during synthesis")
        feeds = {"ids": np.asarray([ids], np.int64), "speed": np.asarray([speed], np.float32)}
        try:
            return [np.asarray(o[0]) for o in session.run(None, feeds)]
        except EngineError:
            raise
        except Exception as exc:  # ORT's own exception types
            raise EngineError(f"Hibari inference failed: {exc}") from exc


_VOICE = VoiceInfo(
    id=f"hibari/{VOICE}",
    name="Hibari heart (American English, female)",
    langs=("en",),
    engine="hibari",
    native_rate=SAMPLE_RATE,
    model=HibariEngine.key,
    speaker=VOICE,
)


class _Scan:
    """The voice inside the installed ``hibari-tts`` package; no files of the models directory."""

    def __init__(self) -> None:
        self.model: Path | None = None

    def builtin(self, add: AddVoice) -> None:
        spec = importlib.util.find_spec("hibari")  # finds the package without importing it
        if spec is None or not spec.submodule_search_locations:
            logger.warning("built-in Hibari voice unavailable: hibari-tts is not installed")
            return
        model = Path(next(iter(spec.submodule_search_locations))) / "assets" / "hibari.onnx"
        if not model.is_file():
            logger.warning("built-in Hibari voice unavailable: %s is missing", model)
            return
        if add(_VOICE, model):
            self.model = model

    def file(self, path: Path, add: AddVoice) -> bool:
        return False

    def engines(self, context: EngineContext, old: Mapping[str, Engine]) -> dict[str, Engine]:
        if self.model is None:
            return {}
        engine = old.get(HibariEngine.key)
        if not isinstance(engine, HibariEngine) or engine.model != self.model:
            engine = HibariEngine(self.model, context.threads, context.cache_dir)
        return {HibariEngine.key: engine}


class HibariKind:
    name = "hibari"
    # Measured by benchmarks/latency.py (docs/benchmarks.md): the model and DSP run at
    # about 1/50 of real time on this box; the model runs over the whole unit first.
    costs = Costs(rtf=0.02, load_s=1.0, first_s_per_char=0.0004)
    streams_in_unit = True  # the DSP runs in windows, and can stop or yield after each
    first_unit_chars = 40
    lang_voices: tuple[tuple[str, str], ...] = ()

    def scanner(self) -> _Scan:
        return _Scan()

    def warm_up(self) -> None:
        pass  # loading is the model and the G2P's lexicons, done with the first request


HIBARI = HibariKind()
