"""Training sentences for the student, from text Debian ships (fortunes-zh, fortunes-min,
fortunes-es/-it/-br, debian-reference-ja and -zh-cn), never the project's evaluation
sentences (``../shared/tools/sentences-public.json``, ``benchmarks/sentences``,
``tests/texts.py``): a sentence that shares a 12-character stretch with any of them is left out.

    python -m training.kokoro_student.texts OUT.jsonl   # one {"lang", "text"} a line
"""

from __future__ import annotations

import gzip
import json
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path

FORTUNES = Path("/usr/share/games/fortunes")
REFERENCE = Path("/usr/share/debian-reference")
ROOT = Path(__file__).resolve().parents[2]
EVALUATION = (
    ROOT.parent / "shared" / "tools" / "sentences-public.json",
    *sorted((ROOT / "benchmarks" / "sentences").glob("*.json")),
    ROOT / "tests" / "texts.py",
)
# Sources per language, and sentence lengths (characters) kept: a unit's worth of speech.
SOURCES = {
    "zh": [FORTUNES / "chinese.u8", FORTUNES / "tang300.u8", FORTUNES / "song100.u8", REFERENCE / "debian-reference.zh-cn.txt.gz"],
    "ja": [REFERENCE / "debian-reference.ja.txt.gz"],
    "en": [FORTUNES / "fortunes", FORTUNES / "literature", FORTUNES / "riddles"],
    "es": sorted((FORTUNES / "es").glob("*.fortunes.u8")) if (FORTUNES / "es").is_dir() else [],
    "it": [FORTUNES / "italia", FORTUNES / "leggi", FORTUNES / "definizioni", FORTUNES / "formiche"],
    "pt-br": [FORTUNES / "brasil"],
}
LENGTHS = {"zh": (6, 48), "ja": (8, 60)}
LATIN = (20, 160)
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]")
ENDS = re.compile(r"(?<=[。！？!?；])|(?<=[.;:])\s+")
SHINGLE = 12


def _read(path: Path) -> str:
    raw = gzip.open(path, "rb").read() if path.suffix == ".gz" else path.read_bytes()
    return raw.decode("utf-8", errors="replace")


def _paragraphs(text: str, cjk: bool) -> Iterator[str]:
    """Fortune entries (split at ``%``) and blank-line paragraphs, wrapped lines joined."""
    for block in re.split(r"\n%\n|\n\s*\n", text):
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        yield ("" if cjk else " ").join(lines)


def sentences(lang: str) -> list[str]:
    cjk = lang in LENGTHS
    low, high = LENGTHS.get(lang, LATIN)
    out = []
    for path in SOURCES[lang]:
        if not path.exists():
            continue
        for para in _paragraphs(_read(path), cjk):
            for s in ENDS.split(para):
                s = s.strip(" \t-—\"'「」『』()（）")
                if not (low <= len(s) <= high) or "\ufffd" in s or re.search(r"[<>{}|\\/=_$#@~`*\[\]]", s):
                    continue
                if cjk:
                    ascii_chars = sum(ch.isascii() and not ch.isspace() for ch in s)
                    if ascii_chars > len(s) // 8 or len(CJK.findall(s)) < len(s) // 2:
                        continue
                    if lang == "ja" and not re.search(r"[\u3040-\u30ff]", s):
                        continue  # kanji alone may be Chinese
                elif not re.fullmatch(r"[\w\s,.;:!?'’\"()\-–—¿¡]+", s) or sum(ch.isdigit() for ch in s) > 6:
                    continue
                out.append(s)
    return sorted(set(out))


def evaluation_shingles() -> set[str]:
    """Every 12-character stretch of the evaluation sentences, spaces removed."""
    seen: set[str] = set()
    for path in EVALUATION:
        if not path.exists():
            continue
        text = re.sub(r"\s+", "", path.read_text(encoding="utf-8"))
        seen.update(text[i : i + SHINGLE] for i in range(max(0, len(text) - SHINGLE + 1)))
    return seen


def held_out(sentence: str, shingles: set[str]) -> bool:
    s = re.sub(r"\s+", "", sentence)
    return any(s[i : i + SHINGLE] in shingles for i in range(max(1, len(s) - SHINGLE + 1)))


def gather(per_lang: dict[str, int], seed: int = 1) -> list[dict[str, str]]:
    """Up to ``per_lang[lang]`` sentences of each language, shuffled, none from evaluation."""
    rng = random.Random(seed)
    shingles = evaluation_shingles()
    items = []
    for lang, count in per_lang.items():
        found = [s for s in sentences(lang) if not held_out(s, shingles)]
        rng.shuffle(found)
        items += [{"lang": lang, "text": s} for s in found[:count]]
    rng.shuffle(items)
    return items


if __name__ == "__main__":
    counts = {"zh": 4000, "ja": 1500, "en": 1500, "es": 500, "it": 400, "pt-br": 400}
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        f.writelines(json.dumps(item, ensure_ascii=False) + "\n" for item in gather(counts))
