#!/usr/bin/env python3
"""Kokoro's distilled generator against the teacher: the quality gates of issue 31.

    python3 benchmarks/student_quality.py [--langs zh,ja,en,es,fr,it,pt-br] [--limit N]
        [--out DIR] [--threads 2] [--gates-out models/kokoro-student.json] [--no-write]

For each language, the public sentences (../shared/tools/sentences-public.json, its
``pt`` read as pt-br) and the held-out ones (benchmarks/sentences/{lang}.json and
heldout.json, none of them in the student's training texts), each text once, are
spoken by the language's native Kokoro voice twice in the same run: by the teacher
(``VoiceRegistry.discover(..., generator="teacher")``) and by the student
(``generator="student"``, models/kokoro-student.onnx), each unit in one run by both
(no quick start: the generators alone differ). So is each sentence's first
unit: its first clause (up to the first ``，、,;；`` that is not inside a number) alone,
or the whole sentence when it has none. The WAVs go to ``--out``.

Scored per language and case (sentences, first units):

* error: ../shared/tools/asr_score.py (Whisper base; CER for zh/ja, WER otherwise),
  and P.808 and SIG: ../shared/tools/dnsmos_score.py, the teacher's items and the
  student's scored separately, both run with this Python (``WHISPER_DIR`` defaults
  to ~/.cache/whisper-base);
* between the student and the teacher, unit by unit (the two have the same frames,
  so truncating to the shorter aligns them): F0 RMSE in cents over the frames voiced
  in both, and the voicing error rate (frames voiced in one and not the other), by
  librosa.pyin (60–500 Hz, 10 ms hop); mel-cepstral distortion in dB, c1–c13 of
  librosa's MFCC over the natural log of an 80-band mel magnitude spectrum (floored
  80 dB below the teacher's peak; scaled to cepstral units, ÷ √160, so that the
  standard 10/ln 10 · √(2 Σ Δc²) per frame reads like the usual MCD), averaged over
  the frames where the teacher is within 60 dB of its loudest (its silences left
  out). Frames are pooled over the language's units; the median length difference
  is shown too (a large one means the units did not line up).

A language passes when, for sentences and first units alike, the student's error is at
most 0.01 above the teacher's and its P.808 and SIG at most 0.15 below. The tables go
into docs/benchmarks.md (block "student-quality") unless ``--no-write``; with
``--gates-out`` the passing languages are written as ``{"langs", "measured",
"command"}``, the file ``--generator auto`` reads beside the student.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import latency  # cpu_model, probe_ms, cpu_times, steal_share, write_block

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT.parent / "shared" / "tools"
OWN = ROOT / "benchmarks" / "sentences"
DOC = ROOT / "docs" / "benchmarks.md"
HEADING = "Kokoro's distilled generator: quality gates (issue 31)"
# A lead that makes Kokoro speak a unit in one run (no quick start: ``KokoroEngine._first_symbols``).
WHOLE_LEAD_S = 5.0
RATE, HOP, MELS = 24000, 240, 80
VOICES = {
    "zh": "zf_xiaoxiao", "ja": "jf_alpha", "en": "af_heart", "es": "ef_dora",
    "fr": "ff_siwis", "it": "if_sara", "pt-br": "pf_dora",
}
GENERATORS = ("teacher", "student")
CASES = ("sentences", "first units")
# Gates: the student's error at most this much above the teacher's; P.808 and SIG at
# most this much below.
MAX_ERROR_RISE, MAX_MOS_DROP = 0.01, 0.15
# A clause ends at CJK commas, or at , ; not inside a number (1,280; 2,5 kg).
_CLAUSE_END = re.compile(r"[，、；]|[,;](?!\d)")
_MEAN = re.compile(r"^MEAN (\S+) (?:CER|WER) ([0-9.]+) over \d+$", re.MULTILINE)


@dataclass(frozen=True)
class Unit:
    """One text to speak: ``ref`` is what the ASR score compares against."""

    lang: str
    case: str
    name: str
    text: str
    ref: str


def sentences(lang: str, limit: int | None) -> list[tuple[str, str]]:
    """(text, ref) for ``lang`` from the public set and the held-out ones, each text once."""
    public = json.loads((TOOLS / "sentences-public.json").read_text(encoding="utf-8"))
    sets = [public.get("pt" if lang == "pt-br" else lang, [])]
    if (OWN / f"{lang}.json").exists():
        sets.append(json.loads((OWN / f"{lang}.json").read_text(encoding="utf-8"))[lang])
    sets.append(json.loads((OWN / "heldout.json").read_text(encoding="utf-8")).get(lang, []))
    out: dict[str, str] = {}
    for items in sets:
        for item in items[:limit]:
            text, ref = (item, item) if isinstance(item, str) else (item["text"], item["ref"])
            out.setdefault(text, ref)
    return list(out.items())


def first_clause(text: str) -> str:
    """``text`` up to and with its first clause mark, or all of it."""
    m = _CLAUSE_END.search(text)
    return text[: m.end()] if m and text[: m.start()].strip() else text


def units(langs: list[str], limit: int | None) -> list[Unit]:
    out = []
    for lang in langs:
        for i, (text, ref) in enumerate(sentences(lang, limit)):
            out.append(Unit(lang, "sentences", f"{lang}_s{i:03d}", text, ref))
            out.append(Unit(lang, "first units", f"{lang}_u{i:03d}", first_clause(text), first_clause(ref)))
    return out


def synthesize(todo: list[Unit], generator: str, threads: int, folder: Path) -> None:
    """Every unit by ``generator`` into ``folder``/NAME.wav (24 kHz, 16 bit)."""
    from rtts.config import _default_cache_dir
    from rtts.engines.voices import VoiceRegistry

    folder.mkdir(parents=True, exist_ok=True)
    registry = VoiceRegistry.discover(None, _default_cache_dir(), threads=threads, generator=generator)
    engine = None
    try:
        for unit in todo:
            voice = registry.get(f"kokoro/{VOICES[unit.lang]}")
            engine = registry.engine_for(voice)
            t0 = time.perf_counter()
            # Each unit in one run for both generators (a lead, and no run bound: nothing is
            # paced): with none, the teacher's Mandarin unit was its quick start and the
            # rest (two runs, other prosody, 160 ms shorter) and the student's one run, so
            # the F0, voicing and MCD rows compared different speech (374 cents).
            chunks = [c for c in engine.synthesize(unit.text, voice, unit.lang, 1.0, lead_s=WHOLE_LEAD_S)
                      if isinstance(c, np.ndarray)]
            spoken_by = engine.generator[unit.lang]  # type: ignore[attr-defined]
            if spoken_by != generator:
                raise SystemExit(f"{unit.lang} was spoken by the {spoken_by}, not the {generator}: is "
                                 "models/kokoro-student.onnx there and loadable? (see the log above)")
            audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
            sf.write(folder / f"{unit.name}.wav", audio, RATE, subtype="PCM_16")
            took = time.perf_counter() - t0
            print(f"  {generator} {unit.name} {audio.size / RATE:5.2f} s in {took:5.2f} s  {unit.text}",
                  flush=True)
    finally:
        if engine is not None:
            engine.unload()
        if registry.host is not None:
            registry.host.stop()


def write_items(todo: list[Unit], folder: Path, case: str) -> Path:
    path = folder / f"items-{case.replace(' ', '-')}.json"
    items = [{"lang": u.lang, "text": u.ref, "wav": str(folder / f"{u.name}.wav")}
             for u in todo if u.case == case]
    path.write_text(json.dumps(items, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def run_tool(tool: str, *args: str, threads: int, python: str) -> str:
    """``tool`` (in ../shared/tools) run with ``python`` (the scorers' venv, or this one);
    its stdout. Whisper's model is looked for in ~/.cache/whisper-base unless WHISPER_DIR
    says otherwise."""
    env = {"WHISPER_DIR": str(Path.home() / ".cache" / "whisper-base"), "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run([python, str(TOOLS / tool), *args], env=env | dict(os.environ),
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{tool} {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def asr_means(items: Path, langs: list[str], threads: int, python: str) -> dict[str, float]:
    """{lang: mean error} from asr_score.py's ``MEAN`` lines (which fold pt-br to pt)."""
    printed = run_tool("asr_score.py", str(items), threads=threads, python=python)
    (items.parent / f"{items.stem}.asr.txt").write_text(printed, encoding="utf-8")
    folded = {lang.split("-")[0]: lang for lang in langs}
    return {folded[lang]: float(mean) for lang, mean in _MEAN.findall(printed) if lang in folded}


def dnsmos_means(items: list[Path], out: Path, threads: int, python: str) -> dict[Path, dict[str, dict[str, float]]]:
    """{items file: {lang: {"p808": mean, "sig": mean}}} from dnsmos_score.py's per-file JSON."""
    scores = out / "dnsmos.json"
    run_tool("dnsmos_score.py", *map(str, items), "--json", str(scores), threads=threads, python=python)
    rows_by_path = json.loads(scores.read_text(encoding="utf-8"))
    means: dict[Path, dict[str, dict[str, float]]] = {}
    for path in items:
        per_lang: dict[str, list[dict]] = {}
        for row in rows_by_path[str(path)]:
            per_lang.setdefault(row["lang"], []).append(row)
        means[path] = {lang: {m: float(np.mean([r[m] for r in rows])) for m in ("p808", "sig")}
                       for lang, rows in per_lang.items()}
    return means


@dataclass
class Distance:
    """Frame counts and sums pooled over a language's units, student against teacher."""

    cents_sq: float = 0.0
    both_voiced: int = 0
    voicing_errors: int = 0
    frames: int = 0
    mcd: float = 0.0
    mcd_frames: int = 0
    length_ms: list[float] = field(default_factory=list)  # student minus teacher, per unit

    def add(self, teacher: np.ndarray, student: np.ndarray) -> None:
        import librosa

        self.length_ms.append(1000 * (student.size - teacher.size) / RATE)
        n = min(teacher.size, student.size)
        teacher, student = teacher[:n], student[:n]
        (f0_t, v_t, _), (f0_s, v_s, _) = (librosa.pyin(y, fmin=60, fmax=500, sr=RATE, hop_length=HOP)
                                          for y in (teacher, student))
        both = v_t & v_s
        self.cents_sq += float(np.sum((1200 * np.log2(f0_s[both] / f0_t[both])) ** 2))
        self.both_voiced += int(both.sum())
        self.voicing_errors += int((v_t != v_s).sum())
        self.frames += v_t.size
        mel_t, mel_s = (librosa.feature.melspectrogram(y=y, sr=RATE, n_fft=1024, hop_length=HOP, n_mels=MELS,
                                                       power=1.0) for y in (teacher, student))
        floor = mel_t.max() * 1e-4  # 80 dB below the teacher's loudest band
        # librosa's orthonormal DCT, divided by sqrt(2 * MELS): the cepstrum's own scale
        # (log S = c0 + 2 sum c_k cos k w), the one the 10/ln 10 sqrt(2 ...) formula is for.
        c_t, c_s = (librosa.feature.mfcc(S=np.log(np.maximum(m, floor)), n_mfcc=14)[1:] / math.sqrt(2 * MELS)
                    for m in (mel_t, mel_s))
        energy = (mel_t**2).sum(axis=0)
        speech = energy > energy.max() * 1e-6
        per_frame = 10 / math.log(10) * np.sqrt(2 * ((c_t - c_s) ** 2).sum(axis=0))
        self.mcd += float(per_frame[speech].sum())
        self.mcd_frames += int(speech.sum())

    def f0_rmse(self) -> float:
        return math.sqrt(self.cents_sq / self.both_voiced) if self.both_voiced else math.nan

    def voicing(self) -> float:
        return self.voicing_errors / self.frames if self.frames else math.nan

    def mcd_db(self) -> float:
        return self.mcd / self.mcd_frames if self.mcd_frames else math.nan


def distances(todo: list[Unit], out: Path) -> dict[tuple[str, str], Distance]:
    found: dict[tuple[str, str], Distance] = {}
    for unit in todo:
        teacher, _ = sf.read(out / "teacher" / f"{unit.name}.wav", dtype="float32")
        student, _ = sf.read(out / "student" / f"{unit.name}.wav", dtype="float32")
        found.setdefault((unit.lang, unit.case), Distance()).add(teacher, student)
    return found


def verdict(scores: dict, lang: str) -> list[str]:
    """The gates ``lang`` fails (empty when it passes)."""
    failed = []
    for case in CASES:
        t, s = scores[("teacher", case)], scores[("student", case)]
        checks = (("error", t["error"].get(lang), s["error"].get(lang), lambda d: d <= MAX_ERROR_RISE),
                  ("P.808", t["p808"].get(lang), s["p808"].get(lang), lambda d: d >= -MAX_MOS_DROP),
                  ("SIG", t["sig"].get(lang), s["sig"].get(lang), lambda d: d >= -MAX_MOS_DROP))
        for name, teacher, student, ok in checks:
            if teacher is None or student is None:
                failed.append(f"{case}: no {name}")
            elif not ok(student - teacher):
                failed.append(f"{case}: {name} {student - teacher:+.3f}")
    return failed


def report(scores: dict, dist: dict, todo: list[Unit], langs: list[str], head: str) -> tuple[str, list[str]]:
    lines, passing, summary = [head, ""], [], []
    for lang in langs:
        n = sum(1 for u in todo if u.lang == lang and u.case == "sentences")
        metric = "CER" if lang in ("zh", "ja") else "WER"
        failed = verdict(scores, lang)
        passing += [] if failed else [lang]
        judged = "fails: " + "; ".join(failed) if failed else "passes"
        summary.append(f"| {lang} | {VOICES[lang]} | {n} | {judged} |")
        lines += [f"**{lang}** ({VOICES[lang]}, {n} sentences and their first units)", "",
                  f"| {lang} | sentences: teacher | student | Δ | first units: teacher | student | Δ |",
                  "|---|---|---|---|---|---|---|"]
        for label, key, fmt in ((metric, "error", "{:.3f}"), ("P.808", "p808", "{:.2f}"),
                                ("SIG", "sig", "{:.2f}")):
            cells = []
            for case in CASES:
                t, s = scores[("teacher", case)][key].get(lang), scores[("student", case)][key].get(lang)
                cells += [fmt.format(t) if t is not None else "—", fmt.format(s) if s is not None else "—",
                          f"{s - t:+.3f}" if t is not None and s is not None else "—"]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        rows = (("F0 RMSE, student vs teacher (cents)", Distance.f0_rmse, "{:.0f}"),
                ("voicing error (% of frames)", lambda d: 100 * d.voicing(), "{:.1f}"),
                ("MCD (dB)", Distance.mcd_db, "{:.2f}"),
                ("length, student − teacher (median ms)", lambda d: float(np.median(d.length_ms)), "{:+.0f}"))
        for label, value, fmt in rows:
            cells = ["—" if math.isnan(v := value(dist[(lang, case)])) else fmt.format(v) for case in CASES]
            lines.append(f"| {label} | | | " + " | | | ".join(cells) + " |")  # — : no frame to compare
        lines.append("")
    gates = (f"Gates (sentences and first units alike): error at most +{MAX_ERROR_RISE} above the teacher's, "
             f"P.808 and SIG at most {MAX_MOS_DROP} below.")
    lines += [gates, "",
              "| language | voice | sentences | verdict |", "|---|---|---|---|", *summary, "",
              f"Passing: {', '.join(passing) or 'none'}."]
    return "\n".join(lines), passing


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--langs", default=",".join(VOICES), help=f"comma-separated, of {','.join(VOICES)}")
    p.add_argument("--limit", type=int, help="at most N sentences per language from each set (a quick run)")
    p.add_argument("--out", type=Path, help="folder for WAVs, items and scores (default: a new one in /tmp)")
    p.add_argument("--threads", type=int, default=2, help="inference threads per registry (default 2)")
    p.add_argument("--gates-out", type=Path, help="write the passing languages to this JSON file, "
                   "e.g. models/kokoro-student.json")
    p.add_argument("--scorer-python", type=Path, default=Path(sys.executable),
                   help="the Python of the scorers' venv (faster-whisper, speechmos); default this one")
    p.add_argument("--no-write", dest="write", action="store_false", help="do not touch docs/benchmarks.md")
    args = p.parse_args()
    langs = args.langs.split(",")
    if unknown := set(langs) - set(VOICES):
        p.error(f"unknown languages {', '.join(sorted(unknown))}; known: {', '.join(VOICES)}")
    from rtts.engines.kokoro_student import student_file

    student = student_file()
    if student is None:
        p.error("no models/kokoro-student.onnx to measure")
    digest = hashlib.sha256(student.read_bytes()).hexdigest()[:12]
    out = args.out or Path(tempfile.mkdtemp(prefix="rtts-student-quality-"))
    command = "python3 benchmarks/student_quality.py" + "".join(f" {a}" for a in sys.argv[1:])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    cpu = latency.cpu_model()
    print(f"host: {cpu}", flush=True)
    cpu0, probe0 = latency.cpu_times(), latency.probe_ms()
    print(f"host probe {probe0:.0f} ms before; WAVs and scores in {out}", flush=True)

    todo = units(langs, args.limit)
    for generator in GENERATORS:
        synthesize(todo, generator, args.threads, out / generator)
    dist = distances(todo, out)
    items = {(g, case): write_items(todo, out / g, case) for g in GENERATORS for case in CASES}
    mos = dnsmos_means(list(items.values()), out, args.threads, str(args.scorer_python))
    scores = {}
    for key, path in items.items():
        scores[key] = {"error": asr_means(path, langs, args.threads, str(args.scorer_python)),
                       "p808": {lang: m["p808"] for lang, m in mos[path].items()},
                       "sig": {lang: m["sig"] for lang, m in mos[path].items()}}

    probe1, cpu1 = latency.probe_ms(), latency.cpu_times()
    stolen = latency.steal_share(cpu0, cpu1)
    host = f"host probe {probe0:.0f} ms before, {probe1:.0f} ms after; CPU stolen {stolen:.0%}"
    print(host)
    head = (f"Command: `{command}`; measured {when} on {cpu}; {host} (latency.py `probe_ms`). "
            f"Student: models/kokoro-student.onnx, sha256 {digest}…. Teacher and student speak the same "
            "texts with the language's native voice; error by Whisper base (../shared/tools/asr_score.py), "
            "P.808 and SIG by DNSMOS (dnsmos_score.py); F0, voicing and MCD compare the two unit by unit "
            "(see the script's docstring).")
    section, passing = report(scores, dist, todo, langs, head)
    print("\n" + section)
    if args.write:
        latency.write_block(DOC, "student-quality", section, HEADING)
    if args.gates_out:
        gates = {"langs": passing, "measured": when, "command": command}
        args.gates_out.write_text(json.dumps(gates, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.gates_out}: {', '.join(passing) or 'no language'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
