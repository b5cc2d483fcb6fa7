#!/usr/bin/env python3
"""How well rtts's word timing agrees with an independent listener, and where it must be exact.

    python3 benchmarks/word_timing.py --out /tmp/rtts-word-timing.json          # 4-5 min on 2 cores
    python3 benchmarks/word_timing.py --quick --out /tmp/rtts-word-timing.json  # a smoke run

It starts ``python3 -m rtts serve`` (benchmarks/latency.py's ServerProcess, phrase cache
off; ``--url`` uses a running server instead) and, over the WebSocket (protocol v1,
``hello {words: true, format: pcm16, sample_rate: 16000, frame_ms: 20}``), speaks
sentences with each engine and language: Kokoro English (af_heart), Mandarin (no voice
named: the path users take), Japanese (jf_alpha), Spanish (ef_dora) and French
(ff_siwis); Piper en_US-joe-medium; Hibari heart. Mandarin and Japanese are spoken a
second time with ``words: "char"``. The sentences are the public set
(../shared/tools/sentences-public.json) and an even sample of this repository's own
(benchmarks/sentences: numbers, dates, times, money, mixed-language runs), plus, per
language, two with a ``<break time="500ms"/>``. Each utterance's audio (16 kHz, what
Whisper listens at) and ``words`` messages are kept.

**The listener.** Whisper base (faster-whisper, int8, beam 5, no VAD: the shared scorer's
model and settings) transcribes every WAV with ``word_timestamps=True``, in the scorer's
venv (``--scorer-python``; benchmarks/whisper_words.py). Its words and ours are aligned by
their text: both are folded (NFKC, lower case, punctuation dropped, katakana as hiragana;
Whisper's Mandarin to simplified characters) into tokens, words for the space-delimited
languages and characters for Chinese and Japanese, and difflib aligns the two token
sequences. A word of ours is compared with a word of Whisper's at the start when their
first tokens are aligned with each other, and at the end when their last tokens are:
"$23.50" against Whisper's "$23" + ".50," gives a start (23 = 23) and an end (50 = 50); a
number Whisper heard as something else is not compared at all. The first word of each of
Whisper's segments has no start of its own (Whisper puts it at the segment's start), so
its start is not compared either. A row compares only its engine's words (the mark before
a word names its voice: the other language of a mixed sentence may be another engine's)
and only timed ones (an engine that does not time sends ``start == end``; counted as
untimed). Per engine and language the table gives how many words were compared, the
median and 95th percentile of |ours - Whisper's| for starts and for ends (the issue's
targets: median <= 60 ms, p95 <= 150 ms), and the median of the signed start difference
(positive: ours later) with the median distance from it (how much is not one offset).

**Whisper's own spread.** Whisper's timestamps come from cross-attention on a 20 ms grid
and are themselves off by tens of ms. To show how much, every WAV is transcribed a second
time with 310 ms of digital silence in front (not a multiple of 20 ms, so the grid falls
half a frame differently on the same speech): a perfect listener's times would move by
exactly 310 ms. The spread is the median and p95 of |shifted - 310 ms - unshifted| over
the words the two runs share (aligned the same way), leaving out the first word of each
of Whisper's segments in either run, whose start it pins to the segment's (0.00 s,
whatever silence comes first): an artefact of the added silence, not jitter. This is
Whisper's repeatability; its accuracy shows where the truth is in the waveform: at the
breaks and after pauses (below), measured for Whisper's words as for ours.

**Exactness checks.** (1) Around each ``<break time="500ms"/>``: the gap between the end
of the word before it and the start of the word after it, against the silence the audio
really has there (the longest stretch of 5 ms windows more than 40 dB below the
utterance's loudest, the rule rtts.engines.trim cuts by; it holds the 500 ms, the unit
pause when the break ends a sentence, and what the model left on either side); it passes
within one 20 ms frame. Both words' edges are given against the silence's, ours and
Whisper's. (2) The first word's start against the audio's first sound, and (3) the last
word's end against the utterance's audio length, the same tolerance. (4) Order: every
entry's text span after the one before, ``start <= end`` and starts in order; and every
read character (letters, digits, symbols, "%"; not markup) in some entry's span. (5)
Early: a word whose ``start`` lies in audio already received when its ``words`` message
came is counted late (the protocol sends words before their audio). (6) After each pause
of 100 ms or more inside an utterance, where the sound returns, against the start of our
word that begins there and of Whisper's word paired with it.

Prints the Markdown tables (for docs/benchmarks.md) and the host probe of
benchmarks/latency.py (accuracy does not depend on the host's speed; the probe tells how
busy it was), writes everything per utterance to ``--out``, and keeps WAVs and
transcripts in ``--work``. Engines whose timing the server does not send yet get a row
that says so.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import unicodedata
import wave
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
from websockets.asyncio.client import connect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import latency  # noqa: E402  (ServerProcess, probe_ms)

TOOLS = ROOT.parent / "shared" / "tools"
PUBLIC = TOOLS / "sentences-public.json"
OWN = ROOT / "benchmarks" / "sentences"
LISTENER = ROOT / "benchmarks" / "whisper_words.py"
DEFAULT_SCORER_PYTHON = Path("/work/score-venv/bin/python")
DEFAULT_WHISPER_DIR = Path.home() / ".cache" / "whisper-base"

RATE = 16000  # Whisper's rate: the server resamples, so its clock is the one clients get
FRAME_MS = 20
SHIFT_S = 0.31  # the silence put before the second Whisper run (see the docstring)
BREAK_MS = 500
TARGET_MEDIAN_MS, TARGET_P95_MS = 60.0, 150.0
CJK = ("zh", "ja")  # compared character by character
# Silence is what the trimmer takes for it (rtts.engines.trim: 40 dB under the loudest
# frame), measured in windows short enough to place an edge within a quarter frame.
SILENCE_DB = -40.0
SILENCE_WINDOW_S = 0.005
# A pause inside an utterance this long (a sentence's or a clause's, a break) gives a plain
# onset after it; a word of ours starting this near it is the word that begins there.
MIN_PAUSE_S, NEAR_S = 0.1, 0.1


@dataclass(frozen=True)
class Case:
    """One row of the table: an engine speaking one language."""

    engine: str
    lang: str
    voice: str | None  # None: no voice named, the server picks the language's voice
    unit: str = "word"  # what hello.words asks for: "word", or "char" (Chinese, Japanese)

    @property
    def key(self) -> str:
        return f"{self.engine}-{self.lang}" + ("-char" if self.unit == "char" else "")


CASES = (
    Case("kokoro", "en", "kokoro/af_heart"),
    Case("kokoro", "zh", None),
    Case("kokoro", "ja", "kokoro/jf_alpha"),
    Case("kokoro", "es", "kokoro/ef_dora"),
    Case("kokoro", "fr", "kokoro/ff_siwis"),
    Case("piper", "en", "piper/en_US-joe-medium"),
    Case("hibari", "en", "hibari/heart"),
    Case("kokoro", "zh", None, "char"),
    Case("kokoro", "ja", "kokoro/jf_alpha", "char"),
)
QUICK_CASES = ("kokoro-en", "kokoro-zh", "kokoro-ja", "kokoro-es", "piper-en", "hibari-en")

_BREAK = f'<break time="{BREAK_MS}ms"/>'
# Per language: a break inside a clause (nothing but the break between the words), and one
# after a sentence (the unit pause comes on top; rtts.text.split.PAUSE_MS).
BREAKS = {
    "en": (f"Please stand clear of the doors {_BREAK} the train is about to leave.",
           f"Your total is $23.50. {_BREAK} Thank you for shopping with us."),
    "zh": (f"请站在黄线以外{_BREAK}耐心等候列车。", f"会议将于3月15日开始。{_BREAK}请准时参加。"),
    "ja": (f"まもなく電車がまいります{_BREAK}黄色い線の内側までお下がりください。",
           f"お会計は1,280円です。{_BREAK}ありがとうございました。"),
    "es": (f"El tren con destino a Sevilla {_BREAK} saldrá con diez minutos de retraso.",
           f"Su cita es el jueves a las 9:15. {_BREAK} Por favor, llegue a tiempo."),
    "fr": (f"Le train à destination de Marseille {_BREAK} partira avec dix minutes de retard.",
           f"Votre rendez-vous est jeudi à 9 h 15. {_BREAK} Merci d'arriver à l'heure."),
}


# ---------------------------------------------------------------- sentences


def own_sentences(lang: str) -> list[str]:
    """This repository's sentences spoken in ``lang``: its own files and the mixed ones led by it."""
    out: list[str] = []
    for path in sorted(OWN.glob("*.json")):
        for key, entries in json.loads(path.read_text(encoding="utf-8")).items():
            for entry in entries:
                if isinstance(entry, list):  # [text, [langs]]: a mixed sentence, spoken in its first
                    if entry[1][0] == lang:
                        out.append(entry[0])
                elif key == lang:
                    out.append(entry if isinstance(entry, str) else entry["text"])
    return out


def spread_pick(items: list[str], n: int) -> list[str]:
    """``n`` of ``items`` spaced evenly from first to last (all of them when there are fewer)."""
    if len(items) <= n:
        return list(items)
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)] if n > 1 else items[:1]


def sentences_for(lang: str, public: int, own: int, breaks: int) -> list[str]:
    """The first ``public`` public sentences, ``own`` of ours spread over the files, ``breaks`` with a break."""
    shared = json.loads(PUBLIC.read_text(encoding="utf-8")).get(lang, [])[:public]
    mine = [s for s in own_sentences(lang) if s not in shared]
    return [*shared, *spread_pick(mine, own), *BREAKS[lang][:breaks]]


# ---------------------------------------------------------------- alignment (pure)


_SPACED_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


def tokens(text: str, lang: str) -> list[str]:
    """What two spellings of a word are compared by: characters (zh, ja) or words, folded."""
    s = unicodedata.normalize("NFKC", text).lower().replace("\u2019", "'")
    if lang.split("-")[0] in CJK:
        # Katakana as hiragana: Whisper writes まもなく as マモナク as often as not.
        return [chr(ord(ch) - 0x60) if "\u30a1" <= ch <= "\u30f6" else ch
                for ch in s if unicodedata.category(ch)[0] in "LN"]
    return _SPACED_TOKEN.findall(s)


@dataclass(frozen=True)
class Alignment:
    """Pairs (our word, their word): first tokens aligned (``starts``), last ones (``ends``)."""

    starts: tuple[tuple[int, int], ...]
    ends: tuple[tuple[int, int], ...]


def align(ours: list[list[str]], theirs: list[list[str]]) -> Alignment:
    """Align two tokenized word lists by their tokens (difflib), pair the words whose edges meet.

    Words with no tokens (punctuation alone) take no part. The matching blocks of
    ``difflib.SequenceMatcher`` run in order on both sides, so pairs are in order too.
    """
    def flat(words: list[list[str]]) -> list[tuple[str, int, bool, bool]]:
        return [(tok, i, k == 0, k == len(toks) - 1)
                for i, toks in enumerate(words) for k, tok in enumerate(toks)]

    a, b = flat(ours), flat(theirs)
    matcher = difflib.SequenceMatcher(None, [t[0] for t in a], [t[0] for t in b], autojunk=False)
    starts, ends = [], []
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            _, i, i_first, i_last = a[block.a + k]
            _, j, j_first, j_last = b[block.b + k]
            if i_first and j_first:
                starts.append((i, j))
            if i_last and j_last:
                ends.append((i, j))
    return Alignment(tuple(starts), tuple(ends))


def differences(ours: list[tuple[float, float]], theirs: list[tuple[float, float]], pairs: Alignment,
                shift: float = 0.0) -> tuple[list[float], list[float]]:
    """Signed (ours - theirs + shift) in ms, for the aligned starts and the aligned ends."""
    starts = [1000.0 * (ours[i][0] - theirs[j][0] + shift) for i, j in pairs.starts]
    ends = [1000.0 * (ours[i][1] - theirs[j][1] + shift) for i, j in pairs.ends]
    return starts, ends


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def summary(diffs: list[float]) -> dict[str, Any]:
    """n, median and p95 of |d|, the median of d (the bias) and the median of |d - bias|
    (how much of the difference is not one constant offset), in ms."""
    if not diffs:
        return {"n": 0, "median": None, "p95": None, "bias": None, "around_bias": None}
    bias = statistics.median(diffs)
    return {"n": len(diffs), "median": percentile([abs(d) for d in diffs], 50),
            "p95": percentile([abs(d) for d in diffs], 95), "bias": bias,
            "around_bias": statistics.median(abs(d - bias) for d in diffs)}


# ---------------------------------------------------------------- exactness (pure)


def silences(samples: np.ndarray, rate: int) -> list[tuple[int, int]]:
    """Stretches of near-silence as (first, end) sample positions, window-aligned."""
    win = max(1, round(rate * SILENCE_WINDOW_S))
    n = len(samples) // win
    if n == 0:
        return []
    x = samples[: n * win].astype(np.float64).reshape(n, win)
    rms = np.sqrt(np.mean(x * x, axis=1))
    quiet = rms < rms.max() * 10 ** (SILENCE_DB / 20)
    out, begin = [], None
    for k, q in enumerate([*quiet, False]):
        if q and begin is None:
            begin = k
        elif not q and begin is not None:
            out.append((begin * win, k * win))
            begin = None
    return out


def break_check(
    text: str, words: list[dict[str, Any]], samples: np.ndarray, rate: int, pts0: int
) -> dict[str, Any]:
    """The words' gap around the first ``<break`` of ``text`` against the audio's silence there."""
    tag_start = text.index("<break")
    tag_end = text.index("/>", tag_start) + 2
    before = [k for k, w in enumerate(words) if w["text_end"] <= tag_start]
    after = [k for k, w in enumerate(words) if w["text_start"] >= tag_end]
    if not before or not after:
        return {"ok": False, "why": "no word on one side of the break"}
    prev, nxt = words[before[-1]], words[after[0]]
    gap = nxt["start"] - prev["end"]
    lo, hi = prev["start"] - pts0, nxt["end"] - pts0  # the silence is sought between the two words
    inside = [(a, b) for a, b in silences(samples, rate) if a < hi and b > lo]
    if not inside:
        return {"ok": False, "why": "no silence between the words", "gap_ms": 1000 * gap / rate}
    a, b = max(inside, key=lambda s: s[1] - s[0])
    frame = rate * FRAME_MS // 1000
    return {
        "before": prev["text"], "after": nxt["text"], "indices": (before[-1], after[0]),
        "silence_s": (a / rate, b / rate),
        "gap_ms": 1000 * gap / rate, "silence_ms": 1000 * (b - a) / rate,
        "end_vs_silence_ms": 1000 * (prev["end"] - pts0 - a) / rate,  # + : the word ends after the sound stops
        "start_vs_silence_ms": 1000 * (nxt["start"] - pts0 - b) / rate,  # + : it starts after the sound is back
        "ok": abs(gap - (b - a)) <= frame,
    }


def onsets_after_silence(
    words: list[dict[str, Any]], samples: np.ndarray, rate: int, pts0: int
) -> list[tuple[int, float]]:
    """(index of our word, its start - the sound's return, ms) for each silence of at least
    ``MIN_PAUSE_S`` inside the audio, when one of our words starts within ``NEAR_S`` of its end:
    where a word begins is plain in the waveform there, for us and for Whisper alike."""
    out = []
    for a, b in silences(samples, rate):
        if b - a < MIN_PAUSE_S * rate or a == 0 or b >= len(samples):
            continue
        k = min(range(len(words)), key=lambda i: abs(words[i]["start"] - pts0 - b))
        if abs(words[k]["start"] - pts0 - b) <= NEAR_S * rate:
            out.append((k, 1000 * (words[k]["start"] - pts0 - b) / rate))
    return out


def onset_check(words: list[dict[str, Any]], samples: np.ndarray, rate: int, pts0: int) -> dict[str, Any]:
    """The first word's start against the audio's first sound (+: the word starts after it)."""
    quiet = silences(samples, rate)
    sound = quiet[0][1] if quiet and quiet[0][0] == 0 else 0
    first = min(words, key=lambda w: w["start"])
    after = first["start"] - pts0 - sound
    return {"word": first["text"], "after_ms": 1000 * after / rate, "ok": abs(after) <= rate * FRAME_MS // 1000}


def end_check(words: list[dict[str, Any]], n_samples: int, rate: int, pts0: int) -> dict[str, Any]:
    """The last word's end against the audio's length (+: audio goes on after it)."""
    last = max(words, key=lambda w: w["end"])
    after = n_samples - (last["end"] - pts0)
    return {"word": last["text"], "after_ms": 1000 * after / rate, "ok": abs(after) <= rate * FRAME_MS // 1000}


_TAG = re.compile(r"<[^<>]*>")
_READ_PUNCTUATION = set("%‰#&@")  # punctuation by category, read aloud all the same


def uncovered(text: str, words: list[dict[str, Any]]) -> list[str]:
    """Characters of ``text`` that are read (letters, digits, symbols, "%"), outside markup,
    that no word's span holds: "every word of the text in exactly one entry" says none."""
    held = bytearray(len(text))
    for w in words:
        held[w["text_start"]:w["text_end"]] = b"\1" * (w["text_end"] - w["text_start"])
    bare = _TAG.sub(lambda m: " " * len(m.group()), text)
    read = [unicodedata.category(ch)[0] in "LNS" or ch in _READ_PUNCTUATION for ch in bare]
    return [ch for ch, h, r in zip(bare, held, read, strict=True) if r and not h]


def spoken_by(word: dict[str, Any], marks: list[tuple[int, str]]) -> str:
    """The voice of the last mark at or before the word's middle ("" before any mark). An
    untimed word (start == end) sits where its engine's audio ended: the mark before that."""
    middle = (word["start"] + word["end"]) / 2
    if word["start"] == word["end"]:
        middle -= 0.5
    return next((voice for pts, voice in reversed(marks) if pts <= middle), "")


def order_problems(words: list[dict[str, Any]]) -> list[str]:
    """What breaks "every word once, in order": overlapping or backward spans, end before start."""
    out = []
    for k, w in enumerate(words):
        if w["start"] > w["end"] or w["text_start"] >= w["text_end"]:
            out.append(f"{w['text']!r}: empty or reversed")
        if k and (w["text_start"] < words[k - 1]["text_end"] or w["start"] < words[k - 1]["start"]):
            out.append(f"{w['text']!r} after {words[k - 1]['text']!r}: out of order")
    return out


# ---------------------------------------------------------------- speaking


@dataclass
class Utterance:
    case: str
    n: int
    lang: str
    text: str
    voice: str | None
    unit: str
    reason: str = ""
    voices: list[str] = field(default_factory=list)  # who spoke it: the marks' voices, in order
    marks: list[tuple[int, str]] = field(default_factory=list)  # (pts, voice) of each mark
    sample_rate: int = 0
    pts0: int = 0
    samples: int = 0
    wav: str = ""
    words: list[dict[str, Any]] = field(default_factory=list)
    late: int = 0  # words whose start was in audio already received when their message came
    whisper: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.case}-{self.n:02d}"


async def recv(ws: Any, timeout: float) -> dict[str, Any]:
    return msgpack.unpackb(await asyncio.wait_for(ws.recv(), timeout), raw=False)


async def speak(ws: Any, utt: Utterance, timeout: float) -> np.ndarray:
    """One ``speak`` with its words; the audio as int16."""
    msg: dict[str, Any] = {"type": "speak", "id": utt.key, "text": utt.text, "lang": utt.lang}
    if utt.voice:
        msg["voice"] = utt.voice
    await ws.send(msgpack.packb(msg, use_bin_type=True))
    chunks: list[np.ndarray] = []
    received = None  # pts just after the last audio frame
    while True:
        m = await recv(ws, timeout)
        if m.get("id") != utt.key:
            continue
        kind = m["type"]
        if kind == "start":
            utt.sample_rate = m["sample_rate"]
        elif kind == "mark":
            if m.get("voice") and m["voice"] not in utt.voices:
                utt.voices.append(m["voice"])
            utt.marks.append((m["pts"], m.get("voice") or ""))
        elif kind == "words":
            for w in m["words"]:
                utt.late += received is not None and w["start"] < received
            utt.words.extend(m["words"])
        elif kind == "audio":
            pcm = np.frombuffer(m["data"], dtype="<i2")
            if received is None:
                utt.pts0 = m["pts"]
            chunks.append(pcm)
            received = m["pts"] + len(pcm)
        elif kind == "error":
            utt.reason = f"error {m.get('code')}: {m.get('message')}"
        elif kind == "end":
            utt.reason = utt.reason or m["reason"]
            audio = np.concatenate(chunks) if chunks else np.zeros(0, np.int16)
            utt.samples = len(audio)
            return audio


def write_wav(path: Path, samples: np.ndarray, rate: int) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())


async def speak_case(
    url: str, case: Case, texts: list[str], work: Path, timeout: float
) -> list[tuple[Utterance, np.ndarray]]:
    """Every text of one case on a connection of its own, asking for ``case.unit``."""
    out = []
    async with connect(url, max_size=None, open_timeout=timeout) as ws:
        assert (await recv(ws, timeout))["type"] == "ready"
        words = True if case.unit == "word" else case.unit
        hello = {"type": "hello", "format": "pcm16", "sample_rate": RATE, "frame_ms": FRAME_MS, "words": words}
        await ws.send(msgpack.packb(hello))
        ready = await recv(ws, timeout)
        if ready["type"] != "ready":
            raise RuntimeError(f"hello refused: {ready}")
        for n, text in enumerate(texts):
            utt = Utterance(case.key, n, case.lang, text, case.voice, case.unit)
            audio = await speak(ws, utt, timeout)
            if len(audio):
                utt.wav = str(work / f"{utt.key}.wav")
                write_wav(Path(utt.wav), audio, utt.sample_rate)
            print(f"  {utt.key} {utt.reason} {len(utt.words)} words {utt.samples / RATE:.2f} s",
                  file=sys.stderr, flush=True)
            out.append((utt, audio))
    return out


# ---------------------------------------------------------------- listening


def listen(python: Path, whisper_dir: Path, utts: list[Utterance], work: Path) -> dict[str, Any]:
    """Whisper's words for every utterance with audio, from the scorer's venv.

    Audio heard once already (the same text with "word" and "char" is the same audio)
    is not transcribed again.
    """
    job = work / "whisper-in.json"
    result = work / "whisper-out.json"
    first: dict[tuple[str, str], str] = {}  # (language, audio digest) -> the key it was heard under
    same: dict[str, str] = {}
    for u in utts:
        same[u.key] = first.setdefault((u.lang, hashlib.sha1(Path(u.wav).read_bytes()).hexdigest()), u.key)
    items = [{"key": u.key, "wav": u.wav, "lang": u.lang} for u in utts if same[u.key] == u.key]
    job.write_text(json.dumps({"shift_s": SHIFT_S, "items": items}, ensure_ascii=False), encoding="utf-8")
    env = dict(os.environ, WHISPER_DIR=str(whisper_dir))
    subprocess.run([str(python), str(LISTENER), str(job), str(result)], env=env, check=True)
    heard = json.loads(result.read_text(encoding="utf-8"))
    return {key: heard[heard_as] for key, heard_as in same.items()}


def compare(utt: Utterance, words: list[dict[str, Any]]) -> tuple[dict[str, list[float]], Alignment]:
    """Signed differences of one utterance's ``words``: ours vs Whisper's, and Whisper vs
    itself shifted; and how ours and Whisper's were paired."""
    lang = utt.lang
    heard = utt.whisper.get("plain", [])
    shifted = utt.whisper.get("shifted", [])
    rate, pts0 = utt.sample_rate, utt.pts0
    ours = [((w["start"] - pts0) / rate, (w["end"] - pts0) / rate) for w in words]
    theirs = [(w["start"], w["end"]) for w in heard]
    pairs = align([tokens(w["text"], lang) for w in words], [tokens(w["word"], lang) for w in heard])
    # Whisper starts each segment's first word where the segment starts: not a measurement.
    measured = Alignment(tuple(p for p in pairs.starts if not heard[p[1]].get("first")), pairs.ends)
    starts, ends = differences(ours, theirs, measured)
    self_pairs = align([tokens(w["word"], lang) for w in shifted], [tokens(w["word"], lang) for w in heard])
    # A segment's first word is pinned to the segment's start: not jitter (docstring).
    def jitter(pair: tuple[int, int]) -> bool:
        return not (shifted[pair[0]].get("first") or heard[pair[1]].get("first"))

    self_pairs = Alignment(tuple(filter(jitter, self_pairs.starts)), tuple(filter(jitter, self_pairs.ends)))
    spread_s, spread_e = differences([(w["start"], w["end"]) for w in shifted], theirs, self_pairs, -SHIFT_S)
    return {"start": starts, "end": ends, "spread_start": spread_s, "spread_end": spread_e}, pairs


def whisper_at_break(check: dict[str, Any], heard: list[dict[str, Any]], pairs: Alignment) -> dict[str, float]:
    """Whisper's words around a break against the same silence (what it gets wrong where the truth is known)."""
    before, after = check["indices"]
    a, b = check["silence_s"]
    out = {}
    for i, j in pairs.ends:
        if i == before:
            out["whisper_end_vs_silence_ms"] = 1000 * (heard[j]["end"] - a)
    for i, j in pairs.starts:
        if i == after:
            out["whisper_start_vs_silence_ms"] = 1000 * (heard[j]["start"] - b)
    return out


# ---------------------------------------------------------------- report


@dataclass
class Row:
    """One case's utterances, checked and compared."""

    engine: str
    lang: str
    unit: str
    voices: set[str] = field(default_factory=set)
    sentences: int = 0
    failed: int = 0
    timed: int = 0  # utterances that came with timed words
    words: int = 0
    untimed: int = 0  # words sent with start == end
    late: int = 0
    order: list[str] = field(default_factory=list)
    uncovered: list[str] = field(default_factory=list)  # read characters in no word's span
    breaks: list[dict[str, Any]] = field(default_factory=list)
    onsets: list[dict[str, Any]] = field(default_factory=list)
    after_pause: list[dict[str, Any]] = field(default_factory=list)  # words after a pause vs the onset
    ends: list[dict[str, Any]] = field(default_factory=list)
    diffs: dict[str, list[float]] = field(
        default_factory=lambda: {"start": [], "end": [], "spread_start": [], "spread_end": []})

    def add(self, u: Utterance, samples: np.ndarray) -> None:
        self.sentences += 1
        self.voices.update(u.voices)
        if u.reason != "done":
            self.failed += 1
            return
        # Only the words this row's engine spoke (a mixed sentence has another voice's), and
        # of those only the timed: an engine that does not time yet sends its words with
        # start == end (where its audio ends).
        own = [w for w in u.words if spoken_by(w, u.marks).split("/")[0] == self.engine]
        words = [w for w in own if w["end"] > w["start"]]
        self.words += len(own)
        self.untimed += len(own) - len(words)
        if not words:
            return
        self.timed += 1
        self.late += u.late
        self.order += [f"{u.key}: {p}" for p in order_problems(u.words)]
        self.uncovered += [f"{u.key}: {ch!r}" for ch in uncovered(u.text, u.words)]
        if words[0] is u.words[0]:  # the utterance's first sound is this engine's first word
            self.onsets.append({"key": u.key, **onset_check(words, samples, u.sample_rate, u.pts0)})
        self.ends.append({"key": u.key, **end_check(words, u.samples, u.sample_rate, u.pts0)})
        pairs = None
        if u.whisper:
            diffs, pairs = compare(u, words)
            for k, v in diffs.items():
                self.diffs[k] += v
        heard = u.whisper.get("plain", [])
        starts = dict(pairs.starts) if pairs is not None else {}
        for k, ours in onsets_after_silence(words, samples, u.sample_rate, u.pts0):
            j = starts.get(k)
            theirs = None
            if j is not None and not heard[j].get("first"):
                theirs = ours + 1000 * (heard[j]["start"] - (words[k]["start"] - u.pts0) / u.sample_rate)
            self.after_pause.append(
                {"key": u.key, "word": words[k]["text"], "ours_ms": ours, "whisper_ms": theirs})
        if "<break" in u.text:
            check = {"key": u.key, **break_check(u.text, words, samples, u.sample_rate, u.pts0)}
            if pairs is not None and "indices" in check:
                check.update(whisper_at_break(check, u.whisper["plain"], pairs))
            self.breaks.append(check)

    def stats(self) -> dict[str, dict[str, Any]]:
        return {k: summary(v) for k, v in self.diffs.items()}

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "voices": sorted(self.voices), "stats": self.stats()}


def case_rows(utts: list[Utterance], audio: dict[str, np.ndarray]) -> dict[str, Row]:
    rows: dict[str, Row] = {}
    for u in utts:
        rows.setdefault(u.case, Row(u.case.split("-")[0], u.lang, u.unit)).add(u, audio[u.key])
    return rows


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:.0f}"


def _signed(v: float | None) -> str:
    return "–" if v is None else f"{v:+.0f}"


def verdict(row: Row) -> str:
    s = row.stats()
    if not row.timed:
        return "no timing from the server"
    if not s["start"]["n"]:
        return "nothing compared"
    met = all(x["median"] <= TARGET_MEDIAN_MS and x["p95"] <= TARGET_P95_MS
              for x in (s["start"], s["end"]) if x["n"])
    return "met" if met else "**missed**"


def break_cell(b: dict[str, Any]) -> str:
    if "silence_ms" not in b:
        return f"**{b['why']}**"
    cell = (f"{b['gap_ms']:.0f} vs {b['silence_ms']:.0f} "
            f"({b['end_vs_silence_ms']:+.0f}, {b['start_vs_silence_ms']:+.0f}; Whisper "
            f"{_signed(b.get('whisper_end_vs_silence_ms'))}, {_signed(b.get('whisper_start_vs_silence_ms'))})")
    return cell if b["ok"] else cell + " **off**"


def uncovered_cell(found: list[str]) -> str:
    """"none", or how many and which characters ("'%' ×2, 'C'")."""
    if not found:
        return "none"
    chars = [f.rsplit(": ", 1)[1] for f in found]
    return "**" + ", ".join(f"{c} ×{chars.count(c)}" for c in dict.fromkeys(chars)) + "**"


def magnitudes_cell(values: list[float]) -> str:
    s = summary(values)
    return f"{_ms(s['median'])} / {_ms(s['p95'])} ({_signed(s['bias'])})"


def checks_cell(checks: list[dict[str, Any]], median: bool = False) -> str:
    """``+M, worst +W (k/n within a frame)`` of ``after_ms`` checks."""
    worst = max(checks, key=lambda c: abs(c["after_ms"]))["after_ms"]
    head = f"{statistics.median(c['after_ms'] for c in checks):+.0f}, worst " if median else ""
    return f"{head}{worst:+.0f} ({sum(c['ok'] for c in checks)}/{len(checks)} within {FRAME_MS} ms)"


def markdown(rows: dict[str, Row]) -> str:
    out = ["| engine | lang | words | voices | sentences (timed) | compared: starts / ends "
           "| start: median / p95 ms | end: median / p95 ms | start bias ms (median distance from it) "
           "| Whisper's spread: start median / p95, end median / p95 ms | target |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows.values():
        st, en, ss, se = (r.stats()[k] for k in ("start", "end", "spread_start", "spread_end"))
        out.append(
            f"| {r.engine} | {r.lang} | {r.unit} "
            f"| {', '.join(v for v in sorted(r.voices) if v.startswith(r.engine + '/'))} "
            f"| {r.sentences} ({r.timed}) "
            f"| {st['n']} / {en['n']} | {_ms(st['median'])} / {_ms(st['p95'])} "
            f"| {_ms(en['median'])} / {_ms(en['p95'])} | {_signed(st['bias'])} ({_ms(st['around_bias'])}) "
            f"| {_ms(ss['median'])} / {_ms(ss['p95'])}, {_ms(se['median'])} / {_ms(se['p95'])} "
            f"| {verdict(r)} |")
    out += ["", "| engine | lang | words | break: gap in the timing vs silence in the audio, ms "
            "(ours, then Whisper's: word end, word start vs the silence's edges) | first word's start vs the first sound, ms "
            "(median, worst) | last word's end: audio after it, ms (worst) | in order | read characters in no word "
            "| words untimed | words late |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    pause_rows = ["", "| engine | lang | words | words after a pause | ours − the sound's return: median / p95 "
                  "of \\|d\\| (median d) ms | Whisper's, the same words it heard | Whisper − the sound's return "
                  "(median d) ms |", "|---|---|---|---|---|---|---|"]
    for r in rows.values():
        if not r.timed:
            continue
        out.append(f"| {r.engine} | {r.lang} | {r.unit} | {'; '.join(map(break_cell, r.breaks)) or '–'} "
                   f"| {checks_cell(r.onsets, median=True)} | {checks_cell(r.ends)} "
                   f"| {'yes' if not r.order else f'**{len(r.order)} problems**'} | {uncovered_cell(r.uncovered)} "
                   f"| {r.untimed} of {r.words} "
                   f"| {r.late} of {r.words} |")
        ours = [p["ours_ms"] for p in r.after_pause]
        theirs = [p["whisper_ms"] for p in r.after_pause if p["whisper_ms"] is not None]
        pause_rows.append(f"| {r.engine} | {r.lang} | {r.unit} | {len(ours)} | {magnitudes_cell(ours)} "
                          f"| {len(theirs)} | {magnitudes_cell(theirs)} |")
    out += pause_rows
    return "\n".join(out)


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="JSON results, per utterance")
    p.add_argument("--work", type=Path,
                   help="folder for the WAVs and Whisper's words (default: a new one in /tmp)")
    p.add_argument("--quick", action="store_true", help="fewer cases and sentences: a smoke run (~1 min)")
    p.add_argument("--cases", help="comma list of case keys, e.g. kokoro-en,piper-en (default: all; --quick: 6)")
    p.add_argument("--url", help="a running server's WebSocket URL (default: start one)")
    p.add_argument("--scorer-python", type=Path, default=DEFAULT_SCORER_PYTHON,
                   help="a python with faster-whisper (default: %(default)s)")
    p.add_argument("--whisper-dir", type=Path, default=Path(os.environ.get("WHISPER_DIR", DEFAULT_WHISPER_DIR)))
    p.add_argument("--reuse", type=Path, metavar="OUT_JSON",
                   help="report again on an earlier run's --out (its WAVs and Whisper's words), speaking nothing")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for one message")
    return p.parse_args(argv)


def speak_all(args: argparse.Namespace, cases: list[Case], work: Path) -> list[tuple[Utterance, np.ndarray]]:
    """Every case's sentences through the server at ``--url``, or one started here."""
    sizes = (2, 1, 1) if args.quick else (3, 5, 2)  # public, own, with a break: per case
    server = None if args.url else latency.ServerProcess(600, work / "server.log", "--log-level", "warning")
    url = args.url or server.url
    spoken: list[tuple[Utterance, np.ndarray]] = []
    try:
        for case in cases:
            spoken += asyncio.run(speak_case(url, case, sentences_for(case.lang, *sizes), work, args.timeout))
    finally:
        if server is not None:
            server.stop()
    return spoken


def reuse(path: Path) -> list[tuple[Utterance, np.ndarray]]:
    """The utterances of an earlier run's ``--out``, Whisper's words included, with their WAVs."""
    spoken = []
    for u in json.loads(path.read_text(encoding="utf-8"))["utterances"]:
        utt = Utterance(**u)
        samples = np.zeros(0, np.int16)
        if utt.wav:
            with wave.open(utt.wav) as w:
                samples = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        spoken.append((utt, samples))
    return spoken


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wanted = args.cases.split(",") if args.cases else QUICK_CASES if args.quick else [c.key for c in CASES]
    cases = [c for c in CASES if c.key in wanted]
    unknown = set(wanted) - {c.key for c in cases}
    if unknown:
        print(f"unknown cases {sorted(unknown)}; there are {[c.key for c in CASES]}", file=sys.stderr)
        return 2
    probes = [latency.probe_ms()]
    if args.reuse:
        work = args.reuse.parent
        spoken = [(u, a) for u, a in reuse(args.reuse) if u.case in wanted]
    else:
        work = args.work or Path(tempfile.mkdtemp(prefix="rtts-word-timing-"))
        work.mkdir(parents=True, exist_ok=True)
        spoken = speak_all(args, cases, work)
        # The server is stopped first, so Whisper has both cores; only timed audio is heard.
        timed = [u for u, _ in spoken if u.wav and any(w["end"] > w["start"] for w in u.words)]
        heard = listen(args.scorer_python, args.whisper_dir, timed, work) if timed else {}
        for u, _ in spoken:
            u.whisper = heard.get(u.key, {})
    probes.append(latency.probe_ms())
    utts = [u for u, _ in spoken]
    rows = case_rows(utts, {u.key: a for u, a in spoken})
    table = markdown(rows)
    print(f"\n{table}\n")
    print(f"host probe {', '.join(f'{p:.0f}' for p in probes)} ms (before, after); WAVs, transcripts in {work}")
    doc = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": " ".join(["python3", *sys.argv]),
           "rate": RATE, "shift_s": SHIFT_S, "probes_ms": probes, "table": table,
           "cases": {k: r.as_dict() for k, r in rows.items()},
           "utterances": [asdict(u) for u in utts]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, ensure_ascii=False, indent=1, default=str), encoding="utf-8")
    return 0 if all(u.reason == "done" for u in utts) else 1


if __name__ == "__main__":
    sys.exit(main())
