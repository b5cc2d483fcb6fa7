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

Where it runs: the model, like every model, in the inference process, with Hibari's
G2P (its lexicons and tagger: 100 MB of Python objects, or 5 MB memory-mapped from
compact copies in the cache directory, ``g2p.compact``) and its DSP (which imports
scipy.fft, 28 MB), through this module's ``host_ops``, so that an idle unload, which
ends that process, gives their memory back. The server keeps only the vocabulary and a
unit's window plan.

Word timing: the model's own durations (frames per phoneme id) come from the same run,
as one more output of its graph (``hibari_timed``, kept in the cache directory; without
one the words share a unit's audio in equal parts per phoneme). Hibari reads its words
with its own front end (normalizer, tokenizer, tagger, lexicon), so its tokens say which
text each word's phonemes are for (``token_words``), and that text is mapped back
through both normalizers to the unit's.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import logging
import math
import subprocess
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rtts.engines.base import AddVoice, Costs, Engine, EngineContext, EngineError, Memory, Timing, VoiceInfo
from rtts.engines.hibari_package import import_hibari
from rtts.engines.timed_windows import WindowedWords, heard
from rtts.engines.trim import silence_bounds
from rtts.g2p.split import split_phonemes
from rtts.g2p.words import PUNCTUATION, Word, kept, with_lexicon
from rtts.host.client import Host
from rtts.text.lexicon import split_phonemes as split_lexicon
from rtts.text.normalize_en import normalize_en
from rtts.text.origins import aligned

__all__ = ["HIBARI", "HibariEngine", "HibariWork", "Windows", "window_sizes"]

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24000
HOP = 300  # samples per frame (hibari.dsp.HOP), known here without importing hibari in the server
# A phoneme's sound is heard about two frames (25 ms) before the frames its duration
# gives it (a frame's 50 ms synthesis window reaches that far back): word onsets after a
# silence came 29 ms (median) after the sound without this (benchmarks/word_onsets.py).
SOUND_LEAD_FRAMES = 2
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


def window_sizes(frames: int, first: int) -> list[int]:
    """Window sizes for a unit of ``frames``: ``first``, then LATER_WINDOW, the last one
    stretched to hold at least LAST_WINDOW frames."""
    sizes: list[int] = []
    done, count = 0, first
    while done < frames:
        if frames - (done + count) < LAST_WINDOW:
            count = frames - done
        sizes.append(count)
        done += count
        count = LATER_WINDOW
    return sizes


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
        from hibari import dsp  # the inference process only (hibari_package)

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


def phoneme_samples(id_start: list[int] | None, ids: int, frames: int) -> np.ndarray:
    """Where each phoneme of a run (one id each, between the two pads) starts in its audio
    of ``frames`` (and the last ends), in samples: from where each id starts in frames
    (``id_start``), else in equal shares. A frame's samples are centred on it (the STFT's
    ``center``), so a boundary between two frames is half a hop before the second; and
    its sound is heard ``SOUND_LEAD_FRAMES`` earlier still."""
    starts = np.asarray(id_start if id_start is not None else np.linspace(0, frames, ids + 1), np.float64)
    samples = np.clip(np.rint((starts - SOUND_LEAD_FRAMES) * HOP - HOP / 2), 0, frames * HOP).astype(np.int64)
    return samples[1:-1]  # phoneme i is id i + 1; the end, where the last pad starts


# ---------------------------------------------------------------- in the inference process

_LOAD, _G2P, _WORDS, _START, _TAKE, _CLOSE, _UNLOAD = (
    "hibari.load", "hibari.g2p", "hibari.words", "hibari.start", "hibari.take", "hibari.close", "hibari.unload"
)
# Hibari's spectra and F0, the outputs ``Windows`` takes; a timed model has its durations after them.
_SPECTRA = 6
# Units whose DSP state the inference process keeps at most: one per job in flight; a
# unit whose generator was dropped without being closed is forgotten beyond this.
_MAX_UNITS = 256
# (model path, threads, cache dir or None): what the inference process loads the model
# from, sent with every unit so that a restarted process loads it again by itself.
Spec = tuple[str, int, "str | None"]


class HibariWork:
    """Hibari's model, G2P and the windows of the units in flight, in the inference
    process (one object per process, made by its first request: see ``host/child.py``).

    The model runs here, not through a ``RemoteSession``, because its outputs (five
    spectra, 2.4 MB per second of audio) would otherwise cross the pipe twice: on a busy
    2-core box a transfer that size waits for the other process again and again (tens of
    ms), while a window of audio (40 frames, 48 kB) fits in one write. Every request
    carries the model's ``Spec``, so a restarted process loads it again by itself."""

    def __init__(self) -> None:
        import_hibari()  # before anything here imports from it: with numpy's FFT
        self.session: Any = None
        self.g2p: Any = None  # hibari.g2p.G2P, over its compact tables where it can
        self.rng = np.random.default_rng()
        self.units: OrderedDict[int, Windows] = OrderedDict()

    def load(self, spec: Spec) -> None:
        """Open the model and the G2P: over its compact tables in the cache directory
        (``g2p.compact``: 5 MB, 0.05 s; built there once), else over its own JSON
        (100 MB, 0.4 s). Both give the same phonemes."""
        model, threads, cache_dir = spec
        cache = None if cache_dir is None else Path(cache_dir)
        if self.session is None:
            from rtts.host.sessions import open_session

            self.session = open_session(_timed(Path(model), cache), threads, "hibari", cache)
        if self.g2p is None:
            self.g2p = _g2p(cache)

    def unload(self) -> None:
        self.session = self.g2p = None
        self.units.clear()

    def phonemes(self, spec: Spec, texts: list[str]) -> list[str]:
        """Hibari's normalizer and G2P over each text."""
        self.load(spec)
        g2p = self.g2p
        if g2p is None:
            raise EngineError("Hibari's G2P did not load")
        return [g2p(text) for text in texts]

    def words(self, spec: Spec, text: str) -> tuple[str, list[tuple[int, int, str, int, int]]]:
        """``phonemes``' phonemes of ``text`` (the same) and its words (``token_words``)."""
        self.load(spec)
        return token_words(self.g2p, text)

    def start(self, spec: Spec, unit: int, ids: list[int], speed: float) -> tuple[int, list[int] | None]:
        """Run the model over a unit's phoneme ids and keep its outputs for ``take``;
        returns the unit's frames, and where each id starts in them (and the last ends)
        when the model gives its durations."""
        self.load(spec)
        feeds = {"ids": np.asarray([ids], np.int64), "speed": np.asarray([speed], np.float32)}
        from rtts.host.sessions import run_options

        outputs = self.session.run(None, feeds, run_options())
        spectra = [np.asarray(o[0]) for o in outputs[:_SPECTRA]]  # the batch of one
        self.units[unit] = Windows(spectra, rng_noise(self.rng, spectra[0].shape[0]))
        while len(self.units) > _MAX_UNITS:
            self.units.popitem(last=False)
        frames = int(spectra[0].shape[1])
        if len(outputs) <= _SPECTRA:
            return frames, None
        return frames, id_frames(outputs[_SPECTRA], frames).tolist()  # one per id (no batch axis)

    def take(self, unit: int, count: int) -> np.ndarray:
        """The audio of the unit's next ``count`` frames (its last window ends it)."""
        windows = self.units.get(unit)
        if windows is None:
            raise EngineError(f"Hibari unit {unit} is not in the inference process (it restarted)")
        audio = windows.take(count)
        if windows.finished:
            del self.units[unit]
        return audio

    def close(self, unit: int) -> None:
        self.units.pop(unit, None)


def _timed(model: Path, cache_dir: Path | None) -> Path:
    """The model with its durations as an output (``hibari_timed``) where the cache
    directory keeps one, else the model as it is."""
    if cache_dir is None:
        return model
    from rtts.engines.hibari_timed import TimedError, cached_timed

    try:
        return cached_timed(model, cache_dir)[0]
    except (TimedError, OSError) as exc:
        logger.warning("Hibari's words are timed in equal shares: %s", exc)
        return model


def id_frames(durations: np.ndarray, frames: int) -> np.ndarray:
    """Where each id starts in a unit's ``frames`` (and the last ends), from its durations:
    the model expands its text by them, then upsamples to ``frames`` (twice as many)."""
    steps = np.concatenate(([0], np.cumsum(np.asarray(durations, np.int64).ravel())))
    return np.rint(steps * (frames / max(1, int(steps[-1])))).astype(np.int64)


def token_words(g2p: Any, text: str) -> tuple[str, list[tuple[int, int, str, int, int]]]:
    """``g2p(text)``, made as its ``__call__`` makes it (its tokens' phonemes joined, a space
    where the text had one), and the words in it: each token whose phonemes are not only
    punctuation, as its span in ``text`` (through Hibari's normalizer, aligned), its text
    and its span in the phonemes."""
    from hibari import g2p as hibari_g2p

    normalized = hibari_g2p.normalize(text)
    tokens = g2p.phonemize_tokens(g2p.tokenize(normalized))
    parts, spelled, found = [], [], []
    at = spelled_at = 0
    for tk in tokens:
        phonemes = g2p.unk if tk.phonemes is None else tk.phonemes
        stripped = phonemes.strip()
        if any(ch not in PUNCTUATION for ch in stripped):
            start = at + len(phonemes) - len(phonemes.lstrip())
            found.append((spelled_at, spelled_at + len(tk.text), tk.text, start, start + len(stripped)))
        piece = phonemes + (" " if tk.whitespace else "")
        parts.append(piece)
        at += len(piece)
        spelled.append(tk.text + tk.whitespace)
        spelled_at += len(tk.text) + len(tk.whitespace)
    joined = "".join(parts)
    whole, lead = joined.strip(), len(joined) - len(joined.lstrip())
    # The tokens' texts are the normalized text's, but are matched rather than assumed so.
    origins = aligned(normalized, "".join(spelled)).then(aligned(text, normalized))
    words = []
    for t_start, t_end, said, p_start, p_end in found:
        start, end = origins.span(t_start, t_end)
        words.append((start, end, said, max(0, p_start - lead), max(0, p_end - lead)))
    return whole, words


def _g2p(cache_dir: Path | None) -> Callable[[str], str]:
    if cache_dir is not None:
        from rtts.g2p import compact

        try:
            return compact.hibari_g2p(*compact.prepared("hibari", cache_dir))  # type: ignore[no-any-return]
        except (OSError, ImportError, KeyError, ValueError, subprocess.SubprocessError) as exc:
            logger.warning("Hibari's G2P loads its full lexicons: %s", exc)
    from hibari.g2p import G2P

    return G2P()  # type: ignore[no-any-return]


# ---------------------------------------------------------------- in the server


class HibariEngine:
    """The "heart" voice. Text goes through rtts's English normalizer, then Hibari's own
    normalizer and G2P (``benchmarks/hibari_text.py``: WER 0.051 against 0.066 for
    Hibari's front end alone on 42 sentences); lexicon phonemes (misaki's alphabet, as
    Kokoro's) pass as written. Each unit runs the model once, then its DSP in windows,
    all in the inference process; the server plans the windows and trims the silence."""

    key = "hibari"
    sample_rate = SAMPLE_RATE

    def __init__(
        self, model: Path, threads: int, cache_dir: Path | None = None, host: Host | None = None
    ) -> None:
        self.model = model  # hibari/assets/hibari.onnx, its vocabulary beside it
        self._spec: Spec = (str(model), threads, None if cache_dir is None else str(cache_dir))
        self._host = host or Host(HibariKind.host_ops)
        self._vocab: dict[str, int] = {}
        self._units = itertools.count()

    @property
    def loaded(self) -> bool:
        return bool(self._vocab)

    def load(self) -> None:
        if self._vocab:
            return
        try:
            vocab = json.loads((self.model.parent / "vocab.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise EngineError(f"cannot read Hibari's vocabulary: {exc}") from exc
        self._host.call(_LOAD, self._spec)
        self._vocab = vocab

    def unload(self) -> None:
        if not self._vocab:
            return
        self._vocab = {}
        if self._host.running:  # else Hibari is gone with the process (and none is started for this)
            try:
                self._host.call(_UNLOAD)
            except EngineError:
                pass
        self._host.release()

    def phonemize_words(self, text: str) -> tuple[str, list[Word]]:
        """``phonemize``'s phonemes (the same), and where in them each word of ``text`` is:
        Hibari's words, a lexicon entry's phonemes one word."""
        self.load()

        def piece_words(piece: str) -> tuple[str, list[Word]]:
            normalized = normalize_en(piece)
            whole, found = self._host.call(_WORDS, self._spec, normalized)
            origins = aligned(piece, normalized)
            return whole, [Word(*origins.span(a, b), said, p, q, i) for i, (a, b, said, p, q) in enumerate(found)]

        joined, words = with_lexicon(text, piece_words)
        phonemes, where = kept(joined, self._vocab)
        return phonemes, [Word(w.text_start, w.text_end, w.said, where[w.start], where[w.end], w.word) for w in words]

    def phonemize(self, text: str) -> str:
        """Hibari's phonemes for ``text``, symbols its model does not know dropped."""
        self.load()
        pieces = list(split_lexicon(text))
        texts = [normalize_en(piece) for is_phonemes, piece in pieces if not is_phonemes]
        said = iter(self._host.call(_G2P, self._spec, texts) if texts else [])
        spoken = (piece if is_phonemes else next(said) for is_phonemes, piece in pieces)
        phonemes = " ".join(p.strip() for p in spoken if p.strip())
        return "".join(ch for ch in phonemes if ch in self._vocab)

    def limit_run_memory(self, mb: float | None) -> None:
        pass  # a unit's spectra are small; its DSP runs in windows

    def synthesize(
        self, text: str, voice: VoiceInfo, lang: str, speed: float, lead_s: float = 0.0, words: bool = False
    ) -> Iterator[np.ndarray | Timing]:
        """See ``Engine.synthesize``. A listener who already holds a second of audio gets
        larger windows (fewer, cheaper per second); one who waits, the first sound early.
        With ``words``, each word's ``Timing`` comes before the chunk it starts in."""
        if not (math.isfinite(speed) and speed > 0):
            raise ValueError(f"speed must be a positive number, not {speed!r}")
        if lang != "en":
            raise ValueError(f"Hibari speaks en only, not {lang!r}")
        first = FIRST_WINDOW if lead_s < 1.0 else LATER_WINDOW
        if not words:
            return self._generate(self.phonemize(text), speed, first)
        phonemes, found = self.phonemize_words(text)
        return self._generate(phonemes, speed, first, found)

    def _generate(
        self, phonemes: str, speed: float, first: int, words: list[Word] | None = None
    ) -> Iterator[np.ndarray | Timing]:
        at = 0  # where the piece is in ``phonemes``: the cuts dropped only spaces
        for piece in split_phonemes(phonemes, MAX_PHONEMES):
            vocab = self._vocab
            if not vocab:
                raise EngineError("Hibari was unloaded during synthesis")
            at = phonemes.index(piece, at)
            timed = None if words is None else (words, at)
            at += len(piece)
            yield from self._unit([0, *(vocab[ch] for ch in piece), 0], speed, first, timed)

    def _unit(
        self, ids: list[int], speed: float, first: int, timed: tuple[list[Word], int] | None = None
    ) -> Iterator[np.ndarray | Timing]:
        """One model run's audio, window by window; with ``timed`` (the words and where the
        run's phonemes are in theirs), each word's ``Timing`` before the chunk it starts in."""
        unit = next(self._units)
        frames, id_start = self._host.call(_START, self._spec, unit, ids, speed)
        windows = self._windows(unit, window_sizes(frames, first))
        try:
            if timed is None:
                yield from (audio for audio, _, _ in windows if audio.size)
            else:
                yield from WindowedWords(*timed, phoneme_samples(id_start, len(ids), frames)).chunks(windows)
        finally:
            windows.close()  # stopped inside the unit: now, not when the windows are collected

    def _windows(self, unit: int, sizes: list[int]) -> Iterator[tuple[np.ndarray, int, int | None]]:
        """A run's windows of ``sizes`` frames: each one's audio, where it starts in the
        run's audio, and for the last how much of it is heard (``timed_windows.heard``)."""
        started = finished = False
        made = 0  # samples the run made before this window, trimmed or not
        try:
            for n, count in enumerate(sizes):
                audio = self._host.call(_TAKE, unit, count)
                finished = n == len(sizes) - 1
                size, cut, end = audio.size, 0, audio.size
                # The model's pads are silence: cut it before the first sound and after the
                # last (a silent pause between words is kept as it is).
                if not started or finished:
                    cut, end = silence_bounds(audio, SAMPLE_RATE, start=not started, end=finished)
                    audio = audio[cut:end]
                started = started or bool(audio.size)
                kept = heard(audio.size, end < size, SAMPLE_RATE) if finished else None
                yield np.clip(audio, -1.0, 1.0), made + cut, kept
                made += size
        finally:
            if not finished:  # stopped inside the unit: the inference process forgets it
                try:
                    self._host.call(_CLOSE, unit)
                except EngineError:
                    pass  # it is gone with its process


_VOICE = VoiceInfo(
    id=f"hibari/{VOICE}",
    name="Hibari heart (American English, female)",
    langs=("en",),
    engine="hibari",
    native_rate=SAMPLE_RATE,
    model=HibariEngine.key,
    speaker=VOICE,
    gender="female",  # hibari's voices.json
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
            engine = HibariEngine(self.model, context.threads, context.cache_dir, context.host)
        return {HibariEngine.key: engine}


class HibariKind:
    name = "hibari"
    # From benchmarks/english_voices.py (docs/benchmarks.md): model and DSP together at
    # about 1/40 of real time on this box; a unit's model runs whole before its first window.
    # Anonymous memory from benchmarks/memory_parts.py --runs (2026-12-05): the session with
    # the G2P over its compact tables, 30-33 MB at load and 47-50 once its OOV net and DSP
    # have run (the budget counts a load at no less than model_mb: what grows after it is
    # not seen then). A run grows with its unit, the model running it whole: +5-19 MB at
    # 60-140 characters, +38 at 180, +47 at 220, +54 at 250, the longest unit (the peak
    # over the 5,000-character request, +87 MB, is the run_mb), so a unit is planned by its
    # length and an English sentence does not need room for the longest.
    costs = Costs(
        rtf=0.025, load_s=1.0, first_s_per_char=0.0005,
        memory=Memory(model_mb=55, run_mb=90, unit_base_mb=12, unit_mb_per_char=0.25),
    )
    streams_in_unit = True  # the DSP runs in windows, and can stop or yield after each
    first_unit_chars = 40
    first_unit_chars_by_lang: tuple[tuple[str, int], ...] = ()
    lang_voices: tuple[tuple[str, str], ...] = ()
    host_ops: Mapping[str, str] = {
        _LOAD: f"{__name__}:HibariWork.load",
        _UNLOAD: f"{__name__}:HibariWork.unload",
        _G2P: f"{__name__}:HibariWork.phonemes",
        _WORDS: f"{__name__}:HibariWork.words",
        _START: f"{__name__}:HibariWork.start",
        _TAKE: f"{__name__}:HibariWork.take",
        _CLOSE: f"{__name__}:HibariWork.close",
    }

    def scanner(self) -> _Scan:
        return _Scan()

    def warm_up(self, host: Host, langs: tuple[str, ...], cache_dir: Path | None = None) -> None:
        pass  # loading the model loads the G2P's lexicons too


HIBARI = HibariKind()
