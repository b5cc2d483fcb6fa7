"""The Mandarin front end's lean imports (``rtts.g2p.zh_imports``): cn2an on demand reads
text as cn2an does, and jieba imports without pkg_resources. That the whole front end
then speaks as before, and a wake imports neither, is tests/live/test_g2p_compact_corpus.py's."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import cn2an

from rtts.g2p import compact, zh_imports

ROOT = Path(__file__).resolve().parents[2]


def _dictionary_lines() -> list[str]:
    """jieba's whole dictionary, 40 words a line: every Han word misaki is ever given."""
    with (compact._package_dir("jieba") / "dict.txt").open(encoding="utf-8") as f:
        words = [line.split(" ")[0] for line in f]
    return ["".join(words[i:i + 40]) for i in range(0, len(words), 40)]


def test_cn2an_on_demand_reads_text_as_cn2an_does() -> None:
    rng = random.Random(31)
    lines = _dictionary_lines()
    lines += ["欢迎光临。", "", "，。！？", "〇一二三四五六七八九十百千万亿", "百分之五十，二分之一，零下三摄氏度"]
    with_digits = [f"我在{rng.randint(1900, 2099)}年{rng.randint(1, 12)}月{rng.randint(1, 31)}日花了{rng.randint(0, 999)}."
                   f"{rng.randint(0, 99)}元，涨了{rng.randint(1, 100)}%，{rng.randint(1, 9)}/{rng.randint(2, 9)}，"
                   f"{rng.randint(-30, 40)}℃，３个" for _ in range(200)]
    on_demand = zh_imports.Cn2anOnDemand()
    for line in lines + with_digits:
        assert on_demand.transform(line, "an2cn") == cn2an.transform(line, "an2cn"), line
    assert on_demand.transform("三百", "cn2an") == cn2an.transform("三百", "cn2an")
    assert on_demand.an2cn("128") == "一百二十八"  # any other name is the real package's


def test_cn2an_is_imported_at_the_first_text_with_a_digit_and_jieba_without_pkg_resources() -> None:
    code = """
import sys
from rtts.g2p import zh_imports
with zh_imports.lean():
    import jieba
    import misaki.zh
print(sorted(m for m in ("pkg_resources", "cn2an.transform") if m in sys.modules), sys.modules["pkg_resources"] if "pkg_resources" in sys.modules else "-")
print(misaki.zh.cn2an.transform("站台在东边。", "an2cn"), "cn2an.transform" in sys.modules)
print(misaki.zh.cn2an.transform("3号站台", "an2cn"), "cn2an.transform" in sys.modules, type(sys.modules["cn2an"]).__name__)
print(sys.modules.get("pkg_resources", "gone") is not None)  # the switch is off again
import os
with open(os.path.join(os.path.dirname(jieba.__file__), "dict.txt"), "rb") as f:
    print(jieba._compat.get_module_res("dict.txt").read(100) == f.read(100))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "[] -",
        "站台在东边。 False",
        "三号站台 True module",
        "True",
        "True",
    ]


def test_lean_leaves_packages_imported_already_as_they_are() -> None:
    real = sys.modules["cn2an"]
    with zh_imports.lean():
        assert sys.modules["cn2an"] is real
    assert sys.modules["cn2an"] is real
