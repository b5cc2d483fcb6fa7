"""The compact G2P tables (``rtts.g2p.compact``): a table answers as the dict it was made
from, refuses what it cannot keep, is kept under its key and reused. That they give the
packages' own phonemes over a corpus, in fresh processes, is
tests/live/test_g2p_compact_corpus.py's."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from rtts.g2p import compact

ROOT = Path(__file__).resolve().parents[2]


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
