#!/usr/bin/env python3
"""Errors in each language of mixed Mandarin + English sentences, from intelligibility.py's transcripts.

    python3 benchmarks/intelligibility.py --mixed --langs zh --voices V --out DIR   # writes DIR/scores.txt
    python3 benchmarks/mixed_errors.py DIR [DIR ...]

A mixed sentence is scored whole in its first language by the shared scorer; this splits
it: the Mandarin part's character error rate (Han characters of the reference against
those of the transcript, by edit distance) and the English part's word error (English
words of the reference not found in the transcript, case-insensitive). Whisper in zh
mode may write an English word in Chinese characters or pinyin; that counts as missed.
Traditional characters are folded to simplified first, as the shared scorer does.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path

import zhconv  # what the shared scorer folds traditional characters with

_HAN = re.compile(r"[\u4e00-\u9fff]")
_WORD = re.compile(r"[A-Za-z]+")


def edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def split_errors(ref: str, hyp: str) -> tuple[int, int, int, int]:
    """(Han edits, Han chars in ref, English words missed, English words in ref)."""
    ref, hyp = (zhconv.convert(unicodedata.normalize("NFKC", t), "zh-cn") for t in (ref, hyp))
    ref_han, hyp_han = "".join(_HAN.findall(ref)), "".join(_HAN.findall(hyp))
    heard = {w.lower() for w in _WORD.findall(hyp)}
    words = [w.lower() for w in _WORD.findall(ref)]
    return edit_distance(ref_han, hyp_han), len(ref_han), sum(w not in heard for w in words), len(words)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    print("| run | sentences | Mandarin CER (Han chars) | English WER (words) |")
    print("|---|---|---|---|")
    for folder in map(Path, argv):
        totals = [0, 0, 0, 0]
        n = 0
        for line in (folder / "scores.txt").read_text(encoding="utf-8").splitlines():
            parts = line.split(" | ")
            if len(parts) != 3 or not _WORD.search(parts[1]) or not _HAN.search(parts[1]):
                continue  # not a mixed zh+en sentence (or the summary line)
            n += 1
            totals = [t + e for t, e in zip(totals, split_errors(parts[1], parts[2]))]
        han = totals[0] / totals[1] if totals[1] else float("nan")
        eng = totals[2] / totals[3] if totals[3] else float("nan")
        print(f"| {folder.name} | {n} | {han:.3f} ({totals[1]} chars) | {eng:.3f} ({totals[3]} words) |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
