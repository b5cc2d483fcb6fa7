"""Trace the inference worker of a copy of the tree, and read the margins off its log.

    git archive HEAD | tar -x -C /tmp/traced      # a copy, never the checkout
    python3 benchmarks/experiments/trace_worker.py patch /tmp/traced
    cd /tmp/traced && python3 benchmarks/listeners.py --paths zh --n 4 --no-write \\
        --server-arg=--admission-max-load=0.8     # the server's log: /tmp/rtts-listeners-*/
    python3 benchmarks/experiments/trace_worker.py margins /tmp/rtts-listeners-*/this-build.log

``patch`` adds a WARNING line (so the default log level keeps it) for every job submitted,
started, resumed and yielded, every chunk (with the audio its listener still held when it
came: below 0, late), every first audio a ``start`` is told and every frame the session
counts late. ``margins`` sums those up: a sentence's first chunk (not an utterance's first,
which is awaited now) and the later ones. ``told`` lists each stream's first job: what it
was told, when it was let in and when its first audio was made; ``units`` what each unit
cost a second of its audio, opening units apart.
Used for docs/benchmarks.md, "A stream between two units, seen in a trace"; the strings it
patches are those of the crowd rule's commit ("Streams let in one after another") and after:
a line per stream let in from waiting for room, with the audio each stream there held.
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

STREAM = "id(getattr(job.sink, '__self__', job.sink)) % 1000"  # one connection, one number
WORKER = [
    ("                t0 = time.perf_counter()  # the load is not part of this job's RTF\n",
     ('                log.warning("TRACE start %s/%s seq=%d chars=%d slack=%.3f budget=%s heap=%d opens=%s", '
      "job.utterance, STREAM, job.seq, len(job.text), job.deadline - time.monotonic(), self._run_budget(entry), "
      "len(self._heap), job.opens)\n")),
    ("                now_pc = time.perf_counter()\n                if entry.samples == 0 and job.text:",
     ('                log.warning("TRACE chunk %s/%s seq=%d audio=%.3f took=%.3f slack=%.3f first=%s opens=%s", '
      "job.utterance, STREAM, job.seq, len(chunk) / job.voice.native_rate, now_pc - chunk_t0, "
      "job.deadline - time.monotonic(), entry.samples == 0, job.opens)\n")),
    ("            elif pace is not None:\n                pace(self._run_budget(entry))",
     ('                log.warning("TRACE resume %s/%s seq=%d slack=%.3f budget=%s", job.utterance, STREAM, job.seq, '
      "job.deadline - time.monotonic(), self._run_budget(entry))\n")),
    ("    def submit(self, job: Job) -> None:\n",
     ('        log.warning("TRACE submit %s/%s seq=%d chars=%d slack=%.3f room=%s", job.utterance, STREAM, '
      "job.seq, len(job.text), job.deadline - time.monotonic(), job.room)\n")),
    ("            entry.compute_s += used_s\n            entry.deadline = job.deadline\n",
     '            log.warning("TRACE yield %s/%s seq=%d", job.utterance, STREAM, job.seq)\n'),
    ("        heard = self._when_heard(job, bound, entries, current, now)\n",
     ('        log.warning("TRACE told seq=%d start=%.3f audio=%.3f room_s=%.3f load=%.3f", job.seq, '
      "loading + heard.start_s, loading + heard.audio_s, heard.room_s, load)\n")),
    ("            self._waiting.pop(0)\n",
     ('            log.warning("TRACE admit %s/%s seq=%d load=%.3f held=%s", job.utterance, STREAM, job.seq, '
      "self._load_of(busy), [round(e.job.deadline - time.monotonic(), 2) for e in entries if e.job is not None])\n")),
]
SESSION = [
    ("        dry = now - self._play_until\n",
     ("        if dry > LATE_TOLERANCE_S:\n"
      '            log.warning("TRACE late %s/%s dry=%.3f", self.id, utt.id, dry)\n')),
]


def _stamped(line: str) -> str:
    """Each line with the monotonic time it was written at."""
    return line.replace('log.warning("TRACE ', 'log.warning("%.3f TRACE ').replace('", ', '", time.monotonic(), ', 1)


def _insert(path: Path, edits: list[tuple[str, str]]) -> None:
    """Each trace line goes after the code it is paired with (before, for ``elif``/``def``)."""
    text = path.read_text()
    for anchor, line in edits:
        if text.count(anchor) != 1:
            raise SystemExit(f"{path}: the code to trace is not there as it was when this was written: {anchor!r}")
        line = _stamped(line.replace("STREAM", STREAM))
        if anchor.startswith(("            elif", "    def")):  # inside the branch or function it opens
            head, _, rest = anchor.partition("\n")
            text = text.replace(anchor, head + "\n" + line + rest)
        elif anchor.endswith(":"):  # the chunk line: before the test it is paired with
            before, _, test = anchor.rpartition("\n")
            text = text.replace(anchor, before + "\n" + line + test)
        else:
            text = text.replace(anchor, anchor + line)
    path.write_text(text)


def patch(root: Path) -> None:
    _insert(root / "rtts/synthesis/inference.py", WORKER)
    _insert(root / "rtts/speech/session.py", SESSION)


def margins(log: Path) -> None:
    firsts: list[float] = []
    later: list[float] = []
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"TRACE chunk .* slack=(-?[\d.]+) first=(\w+) opens=(\w+)", line)
        if m is None:
            continue
        slack, first, opens = float(m[1]), m[2] == "True", m[3] == "True"
        if first and opens:
            continue  # an utterance's first audio is awaited now: no margin to speak of
        (firsts if first else later).append(slack)
    for name, values in (("a sentence's first chunk", firsts), ("later chunks", later)):
        if not values:
            print(f"{name}: none")
            continue
        values.sort()
        print(f"{name}: {len(values)}, least {values[0]:+.3f} s, 5th percentile {values[len(values) // 20]:+.3f} s, "
              f"median {statistics.median(values):+.3f} s, within 0.1 s: {sum(v < 0.1 for v in values)}")
    late = [line for line in log.read_text(errors="replace").splitlines() if "TRACE late" in line]
    print(f"frames late: {len(late)}")


def told(log: Path) -> None:
    """Each stream's first job as its ``start`` was told (``estimate``: when its first audio
    would be made, and when it would be let in) against when the worker let it in and made
    it, from the moment it was told."""
    said: dict[int, tuple[float, float, float, float]] = {}  # seq -> (when, told audio s, told room s, load)
    admitted: dict[int, float] = {}
    first: dict[int, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"([\d.]+) TRACE (told|admit|chunk) (?:\S+ )?seq=(\d+)(.*)", line)
        if m is None:
            continue
        at, kind, seq, rest = float(m[1]), m[2], int(m[3]), m[4]
        if kind == "told":
            said[seq] = (at, float(re.search(r"audio=([\d.]+)", rest)[1]), float(re.search(r"room_s=([\d.]+)", rest)[1]),
                         float(re.search(r"load=([\d.]+)", rest)[1]))
        elif kind == "admit":
            admitted[seq] = at
        elif "first=True" in rest:
            first.setdefault(seq, at)
    for seq, (at, audio, room, load) in sorted(said.items(), key=lambda item: item[1][0]):
        made = first.get(seq)
        went = admitted.get(seq, at) - at
        heard = f"made {made - at:.2f} s, made − told {made - at - audio:+.2f} s" if made else "never made"
        print(f"{at:.3f} seq={seq} load={load:.2f} told {audio:.2f} s (let in after {room:.2f} s), "
              f"let in after {went:.2f} s, {heard}")


def units(log: Path) -> None:
    """What each unit cost a second of its audio (its chunks' compute over their audio), an
    utterance's opening units apart from the later ones: the opening ones are made in the
    quick start's short runs and cut to share the thread, and cost more."""
    made: dict[int, list[float]] = {}  # seq -> [audio s, compute s, chunks]
    opening: dict[int, bool] = {}
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"TRACE chunk \S+ seq=(\d+) audio=([\d.]+) took=([\d.]+) .*opens=(\w+)", line)
        if m is None:
            continue
        unit = made.setdefault(int(m[1]), [0.0, 0.0, 0])
        unit[0] += float(m[2])
        unit[1] += float(m[3])
        unit[2] += 1
        opening[int(m[1])] = m[4] == "True"
    for name, opens in (("opening units", True), ("later units", False)):
        rtfs = sorted(c / a for seq, (a, c, _) in made.items() if opening[seq] == opens and a >= 0.2)
        runs = [n for seq, (a, _, n) in made.items() if opening[seq] == opens and a >= 0.2]
        if rtfs:
            print(f"{name}: {len(rtfs)}, compute a second of audio p10 {rtfs[len(rtfs) // 10]:.3f}, median "
                  f"{statistics.median(rtfs):.3f}, p90 {rtfs[len(rtfs) * 9 // 10]:.3f}; chunks median {statistics.median(runs):g}")


if __name__ == "__main__":
    commands = {"patch": patch, "margins": margins, "told": told, "units": units}
    if len(sys.argv) != 3 or sys.argv[1] not in commands:
        raise SystemExit("usage: trace_worker.py patch DIR | margins LOG | told LOG | units LOG")
    commands[sys.argv[1]](Path(sys.argv[2]))
