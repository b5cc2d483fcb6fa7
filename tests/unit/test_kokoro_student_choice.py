"""Which generator speaks (rtts/engines/kokoro_student.py): the flag, the gates file and
the join's refusals. No model runs here; tests/live/test_kokoro_student.py runs the real one."""

from __future__ import annotations

import json

import pytest

from rtts.config import Config
from rtts.engines import kokoro_student
from rtts.engines.kokoro import LANGS


def test_the_flag_chooses_and_is_validated(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert Config(models_dir=tmp_path, cache_dir=tmp_path).generator == "auto"
    assert Config(models_dir=tmp_path, cache_dir=tmp_path, generator="teacher").generator == "teacher"
    with pytest.raises(ValueError, match="generator must be"):
        Config(models_dir=tmp_path, cache_dir=tmp_path, generator="fastest")
    with pytest.raises(ValueError):
        kokoro_student.student_langs("fastest")


def test_auto_gives_the_student_only_the_languages_that_passed(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / kokoro_student.STUDENT_FILE).write_bytes(b"onnx")
    monkeypatch.setattr("rtts.engines.voicepacks._data_dir", lambda: tmp_path)
    assert kokoro_student.student_langs("auto") == frozenset()  # no gates file: nobody
    (tmp_path / kokoro_student.GATES_FILE).write_text(json.dumps({"langs": ["zh", "xx", "ja"]}))
    assert kokoro_student.student_langs("auto") == {"zh", "ja"}  # an unknown language is ignored
    assert kokoro_student.student_langs("student") == frozenset(LANGS)
    assert kokoro_student.student_langs("teacher") == frozenset()
    (tmp_path / kokoro_student.GATES_FILE).write_text("not json")
    assert kokoro_student.student_langs("auto") == frozenset()
    (tmp_path / kokoro_student.STUDENT_FILE).unlink()
    assert kokoro_student.student_langs("student") == frozenset()  # no student shipped: the teacher


def test_the_languages_it_knows_are_kokoros() -> None:
    assert set(kokoro_student.ALL_LANGS) == set(LANGS)
