#!/usr/bin/env python3
"""Intelligibility benchmark: speak sentences through a running rtts server, score them by ASR.

With a server listening on 127.0.0.1:8765 and the scorer set up once (see
``../shared/tools/README.md``; it lives in its own venv, /work/asr-venv by default)::

    python3 benchmarks/intelligibility.py --out /tmp/rtts-intel --json /tmp/rtts-intel/results.json

For every voice the server offers (or those given by ``--voices``) and every sentence in a
language the voice speaks, the script sends ``speak`` over protocol v1, collects the
``audio`` frames, checks that ``seq`` counts up by one and that ``pts`` advances by exactly
the audio received (in samples, or in ms), and writes a 16-bit mono WAV. After the
connection is closed (so that synthesis and recognition never share the two cores) it runs
``asr_score.py`` once over all WAVs and prints, per voice and language, the word (en) or
character (zh, ja) error rate, the mean time to first audio reported in ``end.stats`` and
the real-time factor. Lower error is better; compare voices on the same sentences.

Exit status: 0 when every utterance arrived whole and was scored, 1 when some utterance
failed or broke seq/pts continuity, 2 when the server or the scorer could not be used.

Needs only websockets, msgpack and numpy (the service's own dependencies); the scorer runs
in its own interpreter (``--scorer-python``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import wave
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_TOOLS = REPO_ROOT.parent / "shared" / "tools"
LOCAL_SENTENCES = REPO_ROOT / "benchmarks" / "sentences"
PUBLIC_SENTENCES = SHARED_TOOLS / "sentences-public.json"
DEFAULT_SCORER = SHARED_TOOLS / "asr_score.py"
DEFAULT_SCORER_VENV = Path("/work/asr-venv/bin/python")
DEFAULT_WHISPER_DIR = Path.home() / ".cache" / "whisper-base"

SCORED_LANGS = ("en", "zh", "ja", "es", "fr", "it", "pt")  # what asr_score.py normalizes
METRIC = {"en": "WER", "zh": "CER", "ja": "CER", "es": "WER", "fr": "WER", "it": "WER", "pt": "WER"}
# The scorer's language code → the server's, where they differ (rtts reads pt as pt-br).
SERVER_LANG = {"pt": "pt-br"}
DEFAULT = "default"  # --voices default: speak without naming a voice (the server routes by language)
PROTOCOL_VERSION = 1
AUDIO_FORMATS = {"pcm16": 2, "f32": 4, "mulaw": 1}  # wire format -> bytes per sample
SERVER_FIELDS = (
    "session",
    "sample_rate",
    "format",
    "frame_ms",
    "default_voice",
    "loaded",
    "limits",
    "voices",
)
STOPPING_REASONS = ("timeout", "closed", "protocol")  # after these the connection is not trusted


# ---------------------------------------------------------------- sentences


@dataclass(frozen=True)
class Sentence:
    langs: tuple[str, ...]  # first one is the language it is spoken and scored in
    text: str
    # How a correct transcript of the reading is written, when the text's written form
    # cannot be: "9am-5pm" is transcribed "9 a.m. to 5 p.m.", "25°C" "25 degrees Celsius".
    ref: str | None = None

    @property
    def lang(self) -> str:
        return self.langs[0]

    @property
    def group(self) -> str:
        """Row label in the tables: "en", or "zh+en" for a mixed-language sentence."""
        return "+".join(self.langs)


def _parse_sentences(data: Any, origin: str) -> list[Sentence]:
    """Accept ``[{lang, text, ref?}]`` or ``{lang: [text | [text, [langs]] | {text, ref?, langs?}]}``."""
    out: list[Sentence] = []
    if isinstance(data, dict):
        for key, entries in data.items():
            for entry in entries:
                if isinstance(entry, str):
                    out.append(Sentence((key,), entry))
                elif isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], list):
                    out.append(Sentence(tuple(entry[1]), entry[0]))
                elif isinstance(entry, dict) and isinstance(entry.get("text"), str):
                    langs = tuple(entry.get("langs") or (key,))
                    out.append(Sentence(langs, entry["text"], entry.get("ref")))
                else:
                    raise TypeError(f"{origin}: cannot read entry {entry!r} under {key!r}")
    elif isinstance(data, list):
        for entry in data:
            lang = entry.get("lang") if isinstance(entry, dict) else None
            if not isinstance(lang, (str, list)) or not isinstance(entry.get("text"), str):
                raise TypeError(f"{origin}: entries must be {{lang, text}}, got {entry!r}")
            out.append(Sentence((lang,) if isinstance(lang, str) else tuple(lang), entry["text"], entry.get("ref")))
    else:
        raise TypeError(f"{origin}: expected a JSON list or object")
    return out


def load_sentences(path: Path) -> list[Sentence]:
    """Read one JSON file, or every ``*.json`` in a folder (sorted by name)."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    sentences: list[Sentence] = []
    for f in files:
        sentences += _parse_sentences(json.loads(f.read_text(encoding="utf-8")), str(f))
    return sentences


def default_sentences_path() -> Path:
    if LOCAL_SENTENCES.is_dir() and any(LOCAL_SENTENCES.glob("*.json")):
        return LOCAL_SENTENCES
    return PUBLIC_SENTENCES


def select_sentences(sentences: list[Sentence], langs: set[str] | None, mixed: bool) -> list[Sentence]:
    kept = []
    for s in sentences:
        if langs is not None and s.lang not in langs:
            continue
        if len(s.langs) > 1 and not mixed:
            continue
        if s.lang not in SCORED_LANGS:
            print(
                f"note: skipping a {s.lang!r} sentence: the scorer knows {', '.join(SCORED_LANGS)}",
                file=sys.stderr,
            )
            continue
        kept.append(s)
    return kept


# ---------------------------------------------------------------- audio


def mulaw_to_int16(data: bytes) -> np.ndarray:
    """ITU-T G.711 mu-law bytes to int16 samples."""
    u = ~np.frombuffer(data, dtype=np.uint8)
    exponent = (u >> 4) & 0x07
    mantissa = (u & 0x0F).astype(np.int32)
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return np.where(u & 0x80, -magnitude, magnitude).astype(np.int16)


def bytes_per_sample(fmt: str) -> int:
    return AUDIO_FORMATS[fmt]


def decode_pcm(data: bytes, fmt: str) -> np.ndarray:
    """Wire audio bytes to int16 mono samples."""
    if fmt == "pcm16":
        return np.frombuffer(data, dtype="<i2").astype(np.int16)
    if fmt == "f32":
        x = np.frombuffer(data, dtype="<f4")
        return (np.clip(x, -1.0, 1.0) * 32767.0).astype(np.int16)
    if fmt == "mulaw":
        return mulaw_to_int16(data)
    raise ValueError(f"unknown audio format {fmt!r}")


def write_wav(path: Path, samples: np.ndarray, sample_rate: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(samples.astype("<i2").tobytes())


# ---------------------------------------------------------------- protocol


class ProtocolViolation(Exception):
    """The server broke protocol v1 in a way that stops the run."""


class UsageError(Exception):
    """The arguments ask for something this server cannot do (an unknown voice, say)."""


async def recv_msg(ws: Any, timeout: float) -> dict[str, Any]:
    frame = await asyncio.wait_for(ws.recv(), timeout)
    if not isinstance(frame, bytes):
        raise ProtocolViolation("received a text frame; v1 sends binary frames only")
    try:
        msg = msgpack.unpackb(frame, raw=False)
    except Exception as exc:  # msgpack raises several types on malformed input
        raise ProtocolViolation(f"frame is not msgpack ({type(exc).__name__})") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise ProtocolViolation(f"frame is not a msgpack map with a string 'type': {msg!r:.120}")
    return msg


async def send_msg(ws: Any, msg: dict[str, Any]) -> None:
    await ws.send(msgpack.packb(msg, use_bin_type=True))


async def expect_ready(ws: Any, timeout: float) -> dict[str, Any]:
    msg = await recv_msg(ws, timeout)
    if msg["type"] == "error":
        raise ProtocolViolation(f"server refused: {msg.get('code')}: {msg.get('message')}")
    if msg["type"] != "ready":
        raise ProtocolViolation(f"expected 'ready', got {msg['type']!r}")
    if msg.get("v") != PROTOCOL_VERSION:
        raise ProtocolViolation(f"server speaks protocol v{msg.get('v')}, this script v{PROTOCOL_VERSION}")
    return msg


@dataclass
class Utterance:
    """What one ``speak`` produced, and what was checked about it."""

    id: str
    voice: str
    group: str
    lang: str
    text: str
    ok: bool = False
    ref: str | None = None  # the scoring reference when it differs from text
    reason: str = ""  # end.reason, or "error:<code>", "no audio", or one of STOPPING_REASONS
    error: str = ""
    sample_rate: int = 0
    format: str = ""
    frames: int = 0
    samples: int = 0
    marks: int = 0
    seq_first: int | None = None
    seq_errors: int = 0
    pts_unit: str = ""  # "samples" or "ms": the unit pts matched
    pts_errors: int = 0
    stats: dict[str, float] = field(default_factory=dict)
    ttfa_client_ms: float | None = None  # speak sent -> first audio frame received
    wall_ms: float = 0.0
    wav: str = ""
    error_rate: float | None = None
    hypothesis: str = ""

    @property
    def audio_ms(self) -> float:
        return 1000.0 * self.samples / self.sample_rate if self.sample_rate else 0.0

    @property
    def continuous(self) -> bool:
        return self.seq_errors == 0 and self.pts_errors == 0


class FrameChecker:
    """Checks that ``seq`` counts up by one and ``pts`` steps by the previous frame's length.

    The unit of ``pts`` is not assumed: each step is compared with the frame length both in
    samples (exact) and in ms (within 1 ms), and the unit with fewer misses wins. A single
    jump counts once, however long the stream goes on after it.
    """

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.first_seq: int | None = None
        self.prev: tuple[Any, Any, int] | None = None  # seq, pts, samples of the previous frame
        self.seq_errors = 0
        self.miss = {"samples": 0, "ms": 0}
        self.first_miss: dict[str, str] = {}
        self.problems: list[str] = []

    def _miss(self, unit: str, why: str) -> None:
        self.miss[unit] += 1
        self.first_miss.setdefault(unit, why)

    def frame(self, seq: Any, pts: Any, n_samples: int) -> None:
        seq_ok, pts_ok = isinstance(seq, int), isinstance(pts, (int, float))
        if self.prev is None:
            self.first_seq = seq if seq_ok else None
        else:
            pseq, ppts, pn = self.prev
            seq_ok = seq_ok and seq == pseq + 1
            if pts_ok and isinstance(ppts, (int, float)):
                step, want_ms = pts - ppts, 1000.0 * pn / self.sample_rate
                if step != pn:
                    self._miss("samples", f"pts steps {step:g} after seq {pseq}, not {pn} samples")
                if abs(step - want_ms) > 1.0:
                    self._miss("ms", f"pts steps {step:g} after seq {pseq}, not {want_ms:g} ms")
        if not seq_ok:
            self.seq_errors += 1
            if len(self.problems) < 5:
                self.problems.append(f"seq {seq!r} after {self.prev[0] if self.prev else None!r}")
        if not pts_ok:
            for unit in self.miss:
                self._miss(unit, f"pts {pts!r} is not a number")
        self.prev = (seq, pts, n_samples)

    def pts_verdict(self) -> tuple[str, int]:
        """The unit pts follows (fewest misses; samples on a tie) and its miss count."""
        unit = "samples" if self.miss["samples"] <= self.miss["ms"] else "ms"
        if self.miss[unit]:
            self.problems.append(f"{self.first_miss[unit]} ({self.miss[unit]} jump(s) in all)")
        return unit, self.miss[unit]


class StreamCollector:
    """Gathers one utterance's ``start`` and ``audio`` frames into int16 samples."""

    def __init__(self, utt: Utterance, t0: float) -> None:
        self.utt, self.t0 = utt, t0
        self.chunks: list[np.ndarray] = []
        self.checker: FrameChecker | None = None

    def _note(self, problem: str) -> None:
        self.utt.error = "; ".join(filter(None, [self.utt.error, problem]))

    def start(self, m: dict[str, Any]) -> None:
        if self.checker is not None:
            self._note("a second start")
            return
        rate, fmt = m.get("sample_rate"), m.get("format")
        if not isinstance(rate, int) or rate <= 0 or fmt not in AUDIO_FORMATS:
            raise ProtocolViolation(f"{self.utt.id}: start has sample_rate {rate!r}, format {fmt!r}")
        self.utt.sample_rate, self.utt.format = rate, fmt
        self.checker = FrameChecker(self.utt.sample_rate)
        if m.get("voice") not in (None, self.utt.voice):
            self._note(f"start names voice {m.get('voice')!r}")

    def audio(self, m: dict[str, Any]) -> None:
        if self.checker is None:
            raise ProtocolViolation(f"{self.utt.id}: audio before start")
        data, width = m.get("data"), bytes_per_sample(self.utt.format)
        if not isinstance(data, bytes):
            raise ProtocolViolation(f"{self.utt.id}: audio data is {type(data).__name__}, not bytes")
        if len(data) % width:
            self._note(f"frame {m.get('seq')} holds {len(data)} bytes, not whole {self.utt.format} samples")
        pcm = decode_pcm(data[: len(data) - len(data) % width], self.utt.format)
        if self.utt.ttfa_client_ms is None:
            self.utt.ttfa_client_ms = 1000.0 * (time.perf_counter() - self.t0)
        self.checker.frame(m.get("seq"), m.get("pts"), len(pcm))
        self.chunks.append(pcm)

    def finish(self) -> np.ndarray:
        utt = self.utt
        utt.wall_ms = 1000.0 * (time.perf_counter() - self.t0)
        audio = np.concatenate(self.chunks) if self.chunks else np.zeros(0, dtype=np.int16)
        utt.frames, utt.samples = len(self.chunks), len(audio)
        if self.checker is not None:
            utt.seq_first, utt.seq_errors = self.checker.first_seq, self.checker.seq_errors
            utt.pts_unit, utt.pts_errors = self.checker.pts_verdict()
            for problem in self.checker.problems:
                self._note(problem)
        if utt.reason == "done" and not len(audio):
            utt.reason = "no audio"
        utt.ok = utt.reason == "done"
        return audio


async def speak_one(
    ws: Any, utt: Utterance, speed: float | None, timeout: float
) -> tuple[Utterance, np.ndarray]:
    """Send one ``speak`` and read until its ``end`` or ``error``; returns int16 samples."""
    msg: dict[str, Any] = {"type": "speak", "id": utt.id, "text": utt.text, "lang": utt.lang}
    if utt.voice != DEFAULT:  # "default": no voice, as a client that names none
        msg["voice"] = utt.voice
    if speed is not None:
        msg["speed"] = speed
    t0 = time.perf_counter()
    stream = StreamCollector(utt, t0)
    await send_msg(ws, msg)
    try:
        while True:
            m = await recv_msg(ws, max(0.0, t0 + timeout - time.perf_counter()))
            kind, mid = m["type"], m.get("id")
            if kind == "error" and mid in (utt.id, None):
                utt.reason, utt.error = f"error:{m.get('code')}", str(m.get("message", ""))
                break
            if mid != utt.id:
                continue  # pong, a late message of an earlier utterance, ...
            if kind == "start":
                stream.start(m)
            elif kind == "audio":
                stream.audio(m)
            elif kind == "mark":
                utt.marks += 1
            elif kind == "end":
                utt.reason, utt.stats = str(m.get("reason")), dict(m.get("stats") or {})
                break
    except TimeoutError:
        utt.reason, utt.error = "timeout", f"no end within {timeout:.0f} s"
    except ConnectionClosed as exc:
        utt.reason, utt.error = "closed", f"connection closed: {exc}"
    except ProtocolViolation as exc:
        utt.reason, utt.error = "protocol", str(exc)
    return utt, stream.finish()


def plan_jobs(
    ready: dict[str, Any], sentences: list[Sentence], wanted: list[str] | None
) -> list[tuple[dict[str, Any], Sentence]]:
    """Pairs (voice, sentence) where the voice lists the sentence's language."""
    if wanted == [DEFAULT]:
        return [({"id": DEFAULT, "langs": []}, s) for s in sentences]
    voices = {v["id"]: v for v in ready.get("voices", [])}
    if wanted:
        unknown = [v for v in wanted if v not in voices]
        if unknown:
            raise UsageError(f"unknown voice(s) {', '.join(unknown)}; the server has {', '.join(voices)}")
        chosen = [voices[v] for v in wanted]
    else:
        chosen = list(voices.values())
    jobs = [(v, s) for v in chosen for s in sentences if SERVER_LANG.get(s.lang, s.lang) in v.get("langs", [])]
    for v in chosen:
        if not any(jv is v for jv, _ in jobs):
            print(
                f"note: no sentence in a language of {v['id']} ({', '.join(v.get('langs', []))})",
                file=sys.stderr,
            )
    return jobs


def safe_name(voice_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", voice_id)


async def synthesize_all(
    args: argparse.Namespace, sentences: list[Sentence], out: Path
) -> tuple[dict[str, Any], list[Utterance]]:
    """One connection: ready, hello, a warm-up per voice, then every (voice, sentence)."""
    results: list[Utterance] = []
    async with connect(args.url, max_size=16 * 2**20, open_timeout=args.timeout) as ws:
        await expect_ready(ws, args.timeout)
        hello: dict[str, Any] = {"type": "hello", "v": PROTOCOL_VERSION, "format": "pcm16"}
        if args.sample_rate:
            hello["sample_rate"] = args.sample_rate
        await send_msg(ws, hello)
        ready = await expect_ready(ws, args.timeout)
        jobs = plan_jobs(ready, sentences, args.voices)
        if not jobs:
            raise UsageError("nothing to do: no voice speaks any of the chosen sentences")
        print(
            f"{args.url}: session {ready.get('session')}, {ready.get('sample_rate')} Hz "
            f"{ready.get('format')}, {len(jobs)} utterances",
            file=sys.stderr,
        )
        if args.warmup:
            first: dict[str, Sentence] = {}
            for v, s in jobs:
                first.setdefault(v["id"], s)
            for n, (vid, s) in enumerate(first.items()):
                utt, _ = await speak_one(
                    ws, Utterance(f"warmup-{n}", vid, s.group, s.lang, s.text), args.speed, args.timeout
                )
                if not utt.ok:
                    print(f"warm-up of {vid} failed: {utt.reason} {utt.error}", file=sys.stderr)
                if utt.reason in STOPPING_REASONS:
                    print(f"stopping: {utt.error}", file=sys.stderr)
                    return ready, [utt]
        counters: dict[tuple[str, str], int] = {}
        for n, (v, s) in enumerate(jobs):
            k = counters.get((v["id"], s.group), 0)
            counters[(v["id"], s.group)] = k + 1
            utt, audio = await speak_one(
                ws, Utterance(f"intel-{n}", v["id"], s.group, s.lang, s.text, ref=s.ref), args.speed, args.timeout
            )
            if len(audio):
                wav = out / safe_name(v["id"]) / f"{s.group}_{k:02d}.wav"
                write_wav(wav, audio, utt.sample_rate)
                utt.wav = str(wav)
            flag = "" if utt.ok and utt.continuous else f"  <-- {utt.reason} {utt.error}".rstrip()
            print(
                f"  [{n + 1}/{len(jobs)}] {v['id']} {s.group}: {utt.audio_ms / 1000:.2f} s audio, "
                f"ttfa {_fmt(utt.stats.get('ttfa_ms'), '.0f')} ms{flag}",
                file=sys.stderr,
            )
            results.append(utt)
            if utt.reason in STOPPING_REASONS:
                print(f"stopping: {utt.error}", file=sys.stderr)
                break
    return ready, results


# ---------------------------------------------------------------- scoring


ITEM_LINE = re.compile(r"^(\S+) (\d+(?:\.\d+)?) \| (.*)$")
MEAN_LINE = re.compile(r"^MEAN (\S+) (WER|CER) (\d+(?:\.\d+)?) over (\d+)$")


def parse_scorer_output(
    stdout: str, items: list[dict[str, str]]
) -> tuple[list[tuple[float, str]], dict[str, float]]:
    """asr_score.py prints ``lang err | ref | hyp`` per item in input order, then ``MEAN`` lines."""
    per_item: list[tuple[float, str]] = []
    means: dict[str, float] = {}
    for line in stdout.splitlines():
        if m := MEAN_LINE.match(line):
            means[m.group(1)] = float(m.group(3))
        elif m := ITEM_LINE.match(line):
            it = items[len(per_item)] if len(per_item) < len(items) else None
            rest = m.group(3)
            if it is None or m.group(1) != it["lang"] or not rest.startswith(it["text"] + " | "):
                raise ValueError(f"scorer line {len(per_item) + 1} does not match its item: {line!r:.200}")
            per_item.append((float(m.group(2)), rest[len(it["text"]) + 3 :]))
    if len(per_item) != len(items):
        raise ValueError(f"scorer printed {len(per_item)} item lines for {len(items)} items")
    return per_item, means


def run_scorer(args: argparse.Namespace, utts: list[Utterance], out: Path) -> dict[str, float]:
    """Runs asr_score.py once over every WAV; fills each utterance's error_rate and hypothesis."""
    scored = [u for u in utts if u.ok and u.wav]
    items = [{"lang": u.lang, "text": u.ref or u.text, "wav": u.wav} for u in scored]
    items_path = out / "items.json"
    items_path.write_text(json.dumps(items, ensure_ascii=False, indent=1), encoding="utf-8")
    env = dict(os.environ, WHISPER_DIR=str(args.whisper_dir))
    cmd = [str(args.scorer_python), str(args.scorer), str(items_path)]
    print(f"scoring {len(items)} WAVs: WHISPER_DIR={args.whisper_dir} {' '.join(cmd)}", file=sys.stderr)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True)
    (out / "scores.txt").write_text(proc.stdout, encoding="utf-8")
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise RuntimeError(f"scorer exited with {proc.returncode}; items are in {items_path}")
    print(f"scored in {time.perf_counter() - t0:.1f} s; transcripts in {out / 'scores.txt'}", file=sys.stderr)
    per_item, means = parse_scorer_output(proc.stdout, items)
    for u, (err, hyp) in zip(scored, per_item, strict=True):
        u.error_rate, u.hypothesis = err, hyp
    for lang, mean in means.items():  # the scorer's own means pool all voices: cross-check ours
        mine = [u.error_rate for u in scored if u.lang == lang and u.error_rate is not None]
        if mine and abs(sum(mine) / len(mine) - mean) > 0.002:
            print(
                f"warning: scorer mean {lang} {mean:.3f} != {sum(mine) / len(mine):.3f} from its items",
                file=sys.stderr,
            )
    return means


# ---------------------------------------------------------------- report


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(utts: list[Utterance]) -> dict[str, dict[str, dict[str, Any]]]:
    """voice id -> group -> aggregate row."""
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for u in utts:
        table.setdefault(u.voice, {}).setdefault(u.group, {"_u": []})["_u"].append(u)
    for groups in table.values():
        for group, row in groups.items():
            us: list[Utterance] = row.pop("_u")
            ok = [u for u in us if u.ok]
            errs = [u.error_rate for u in ok if u.error_rate is not None]
            row.update(
                metric=METRIC.get(group.split("+")[0], "ER"),
                error=_mean(errs),
                n=len(us),
                scored=len(errs),
                failed=len(us) - len(ok),
                discontinuous=sum(not u.continuous for u in us),
                ttfa_ms=_mean([u.stats["ttfa_ms"] for u in ok if "ttfa_ms" in u.stats]),
                ttfa_client_ms=_mean([u.ttfa_client_ms for u in ok if u.ttfa_client_ms is not None]),
                queue_ms=_mean([u.stats["queue_ms"] for u in ok if "queue_ms" in u.stats]),
                rtf=_mean([u.stats["rtf"] for u in ok if "rtf" in u.stats]),
                audio_s=sum(u.audio_ms for u in ok) / 1000.0,
            )
    return table


def _fmt(value: float | None, spec: str) -> str:
    """``format(value, spec)``, or a dash as wide as the spec asks when there is no value."""
    return "-".rjust(int(spec.split(".")[0] or 0)) if value is None else format(value, spec)


def print_tables(ready: dict[str, Any], table: dict[str, dict[str, dict[str, Any]]]) -> None:
    voices = {v["id"]: v for v in ready.get("voices", [])}
    for vid, groups in table.items():
        v = voices.get(vid, {})
        print(
            f"\n{vid}  ({v.get('name', '?')}, {v.get('engine', '?')}, native {v.get('native_rate', '?')} Hz)"
        )
        print(
            f"  {'lang':<7} {'metric':<6} {'error':>6} {'n':>3} {'fail':>4} {'gaps':>4} "
            f"{'ttfa_ms':>8} {'client':>7} {'rtf':>6} {'audio_s':>7}"
        )
        for group, r in groups.items():
            print(
                f"  {group:<7} {r['metric']:<6} {_fmt(r['error'], '6.3f')} {r['n']:>3} {r['failed']:>4} "
                f"{r['discontinuous']:>4} {_fmt(r['ttfa_ms'], '8.0f')} {_fmt(r['ttfa_client_ms'], '7.0f')} "
                f"{_fmt(r['rtf'], '6.3f')} {r['audio_s']:7.1f}"
            )
    print(
        "\nerror: mean WER (en) or CER (zh, ja) over scored utterances, lower is better; ttfa_ms: end.stats "
        "mean; client: speak->first audio as seen here; gaps: utterances with seq/pts breaks"
    )


def write_json(
    path: Path,
    args: argparse.Namespace,
    ready: dict[str, Any],
    utts: list[Utterance],
    table: dict[str, Any],
    means: dict[str, float],
) -> None:
    doc = {
        "url": args.url,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "server": {k: ready.get(k) for k in SERVER_FIELDS},
        "scorer": {"python": str(args.scorer_python), "script": str(args.scorer), "means_all_voices": means},
        "summary": table,
        "utterances": [{**asdict(u), "audio_ms": u.audio_ms} for u in utts],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=1, default=str), encoding="utf-8")


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--url", default="ws://127.0.0.1:8765/ws", help="rtts WebSocket endpoint (default: %(default)s)"
    )
    p.add_argument(
        "--voices",
        type=lambda s: [v for v in s.split(",") if v],
        help="comma list of voice ids (default: every voice, each on the sentences in its langs); "
        "'default' sends no voice, as a client naming none, on every sentence",
    )
    p.add_argument(
        "--sentences",
        type=Path,
        default=default_sentences_path(),
        help="JSON [{lang, text}] or {lang: [text]}, or a folder of such files (default: %(default)s)",
    )
    p.add_argument(
        "--langs", type=lambda s: set(s.split(",")), help="only these sentence languages, e.g. en,zh"
    )
    p.add_argument(
        "--mixed",
        action="store_true",
        help="also speak mixed-language sentences (scored in their first language)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "rtts-intelligibility",
        help="folder for the WAVs, items.json and the scorer's transcripts (default: %(default)s)",
    )
    p.add_argument("--json", type=Path, help="also write machine-readable results here")
    p.add_argument(
        "--scorer-python",
        type=Path,
        default=DEFAULT_SCORER_VENV if DEFAULT_SCORER_VENV.exists() else Path(sys.executable),
        help="interpreter that has faster-whisper (default: %(default)s)",
    )
    p.add_argument("--scorer", type=Path, default=DEFAULT_SCORER, help="the scorer (default: %(default)s)")
    p.add_argument(
        "--whisper-dir",
        type=Path,
        default=Path(os.environ.get("WHISPER_DIR", DEFAULT_WHISPER_DIR)),
        help="Whisper model folder made by setup_whisper.sh (default: $WHISPER_DIR or %(default)s)",
    )
    p.add_argument("--no-score", action="store_true", help="only synthesize and check the stream")
    p.add_argument("--sample-rate", type=int, help="ask the server for this output rate in hello")
    p.add_argument("--speed", type=float, help="speak.speed for every utterance")
    p.add_argument(
        "--no-warmup",
        dest="warmup",
        action="store_false",
        help="skip the unscored first utterance per voice (its TTFA then includes model loading)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds to wait for one utterance's end (default: %(default)s)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        sentences = select_sentences(load_sentences(args.sentences), args.langs, args.mixed)
    except (OSError, ValueError, TypeError) as exc:
        print(f"cannot read sentences: {exc}", file=sys.stderr)
        return 2
    if not sentences:
        print(f"no usable sentences in {args.sentences}", file=sys.stderr)
        return 2
    if not args.no_score and not (args.scorer.exists() and args.whisper_dir.is_dir()):
        print(
            f"scorer {args.scorer} or model {args.whisper_dir} missing; set up with "
            f"{SHARED_TOOLS / 'setup_whisper.sh'} or pass --no-score",
            file=sys.stderr,
        )
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        ready, utts = asyncio.run(synthesize_all(args, sentences, args.out))
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except (OSError, ConnectionClosed, ProtocolViolation, TimeoutError) as exc:
        print(f"server {args.url}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    means: dict[str, float] = {}
    status = 0
    if not args.no_score and any(u.ok for u in utts):
        try:
            means = run_scorer(args, utts, args.out)
        except (RuntimeError, ValueError) as exc:
            print(f"scoring failed: {exc}", file=sys.stderr)
            status = 2
    table = summarize(utts)
    print_tables(ready, table)
    if args.json:
        write_json(args.json, args, ready, utts, table, means)
        print(f"results in {args.json}", file=sys.stderr)
    broken = [u for u in utts if not (u.ok and u.continuous)]
    for u in broken[:10]:
        print(f"problem: {u.id} {u.voice} {u.group}: {u.reason} {u.error}".rstrip(), file=sys.stderr)
    return status or (1 if broken else 0)


if __name__ == "__main__":
    sys.exit(main())
