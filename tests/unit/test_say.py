"""``rtts say`` as a newcomer meets it (issue 30): what --help says, and files it cannot
write refused in one line before any synthesis, never a traceback after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtts.__main__ import build_parser, main


def say_help() -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices["say"].format_help()  # type: ignore[attr-defined]


def test_help_says_where_the_wav_goes_stdin_and_the_text_limit() -> None:
    text = " ".join(say_help().split())
    assert "default out.wav" in text  # no -o wrote out.wav, and --help did not say so
    assert "- reads it from standard input" in text
    assert "--max-text-chars" in text
    assert "--generator GENERATOR Kokoro's waveform generator" in text  # issue 31: the teacher one option away


@pytest.mark.parametrize("where", [
    ["-o", "/nonexistent/dir/x.wav"],
    ["--vtt", "/nonexistent/x.vtt"],
    ["--srt", "/nonexistent/x.srt"],
    ["-o", "."],  # a directory
])
def test_a_file_it_cannot_write_is_one_line_and_a_non_zero_exit(
    where: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    status = main(["say", "Hello.", "-o", str(tmp_path / "ok.wav"), *where, "--models-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("rtts: ") and "Traceback" not in err, err
    assert not (tmp_path / "ok.wav").exists()  # refused before the synthesis, not after it
