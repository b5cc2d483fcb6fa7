"""Kokoro voice files in every form users have them (rtts.voicepacks), and their discovery.

Pure: the files are made here; discovery reads headers only and loads no model.
"""

from __future__ import annotations

import io
import json
import logging
import tarfile
from pathlib import Path

import numpy as np
import pytest

from rtts import voicepacks
from rtts.voices import VoiceRegistry


def style(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((510, 256)).astype(np.float32)


def kokoro_js_bin(path: Path, array: np.ndarray) -> Path:
    path.write_bytes(array.astype("<f4").tobytes())
    return path


def kokoro_js_tarball(path: Path, voices: dict[str, np.ndarray]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in [("package/README.md", b"# kokoro-js\n")] + [
            (f"package/voices/{n}.bin", a.astype("<f4").tobytes()) for n, a in voices.items()
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_kokoro_js_bin_is_read_as_raw_float32(tmp_path: Path) -> None:
    a = style(1)
    path = kokoro_js_bin(tmp_path / "zf_test.bin", a)
    found = voicepacks.scan(path)
    assert list(found) == ["zf_test"]
    assert np.array_equal(voicepacks.load(found["zf_test"]), a)


def test_npy_in_both_layouts(tmp_path: Path) -> None:
    a = style(2)
    np.save(tmp_path / "flat.npy", a)
    np.save(tmp_path / "deep.npy", a.reshape(510, 1, 256))
    for name in ("flat", "deep"):
        found = voicepacks.scan(tmp_path / f"{name}.npy")
        assert list(found) == [name]
        assert np.array_equal(voicepacks.load(found[name]), a)


def test_npz_and_kokoro_onnx_voices_bin_give_one_voice_per_style_array(tmp_path: Path) -> None:
    a, b = style(3), style(4)
    np.savez(tmp_path / "pack.npz", af_one=a.reshape(510, 1, 256), bf_two=b, junk=np.zeros(3))
    np.savez(tmp_path / "voices-v1.0.npz", af_one=a.reshape(510, 1, 256), bf_two=b)
    (tmp_path / "voices-v1.0.npz").rename(tmp_path / "voices-v1.0.bin")  # kokoro-onnx's name for its npz
    for path in (tmp_path / "pack.npz", tmp_path / "voices-v1.0.bin"):
        found = voicepacks.scan(path)
        assert sorted(found) == ["af_one", "bf_two"]
        assert np.array_equal(voicepacks.load(found["bf_two"]), b)


def test_kokoro_js_tarball_gives_every_voice_in_it(tmp_path: Path) -> None:
    voices = {"ef_one": style(5), "ff_two": style(6)}
    path = kokoro_js_tarball(tmp_path / "kokoro-js-1.2.1.tgz", voices)
    found = voicepacks.scan(path)
    assert sorted(found) == ["ef_one", "ff_two"]
    assert np.array_equal(voicepacks.load(found["ff_two"]), voices["ff_two"])


@pytest.mark.parametrize(
    ("name", "content", "why"),
    [
        ("short.bin", b"\0" * 1000, "1000 bytes"),
        ("notes.npy", b"not numpy", "not a readable"),
        ("broken.npz", b"PK\x03\x04 truncated", "not a readable"),
        ("empty.tgz", b"", "not a readable"),
    ],
)
def test_a_file_that_is_not_a_style_vector_is_refused_with_the_reason(
    tmp_path: Path, name: str, content: bytes, why: str
) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ValueError, match=why):
        voicepacks.scan(tmp_path / name)


def test_wrong_shapes_and_non_finite_values_are_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "small.npy", np.zeros((10, 256), np.float32))
    with pytest.raises(ValueError, match="no 510x256"):
        voicepacks.scan(tmp_path / "small.npy")
    np.savez(tmp_path / "ints.npz", a=np.zeros((510, 256), np.int32))
    with pytest.raises(ValueError, match="no 510x256"):
        voicepacks.scan(tmp_path / "ints.npz")
    bad = style(7)
    bad[3, 4] = np.nan
    source = voicepacks.scan(kokoro_js_bin(tmp_path / "nan.bin", bad))["nan"]
    with pytest.raises(ValueError, match="NaN"):
        voicepacks.load(source)


def test_discovery_reads_every_format_and_names_each_file_it_skips(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kokoro_js_bin(tmp_path / "ef_bin.bin", style(8))
    np.save(tmp_path / "ff_npy.npy", style(9))
    np.savez(tmp_path / "pack.npz", if_npz=style(10))
    kokoro_js_tarball(tmp_path / "kokoro-js.tgz", {"pf_tar": style(11), "zf_xiaoxiao": style(12)})
    (tmp_path / "readme.bin").write_bytes(b"hello")
    np.save(tmp_path / "vector.npy", np.zeros(256, np.float32))
    with caplog.at_level(logging.INFO):
        registry = VoiceRegistry.discover(tmp_path, tmp_path / "cache", threads=1)
    for voice, lang in [("ef_bin", "es"), ("ff_npy", "fr"), ("if_npz", "it"), ("pf_tar", "pt-br")]:
        assert registry.voices[f"kokoro/{voice}"].langs[0] == lang
    skipped = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("readme.bin" in m for m in skipped) and any("vector.npy" in m for m in skipped)
    # The tarball's copy of a shipped voice does not replace it, and says so once.
    assert any("kokoro-js.tgz: 1 voices already defined" in r.getMessage() for r in caplog.records)
    assert registry.engines["kokoro"]._style_files["pf_tar"].member == "package/voices/pf_tar.bin"  # type: ignore[attr-defined]


def test_names_say_language_and_gender_and_the_pack_gives_grades() -> None:
    heart = voicepacks.describe("af_heart")
    assert (heart.lang, heart.gender, heart.grade) == ("en", "female", "A")
    yunxi = voicepacks.describe("zm_yunxi")
    assert (yunxi.lang, yunxi.gender) == ("zh", "male")
    assert voicepacks.describe("bm_george").lang == "en-gb"
    assert voicepacks.describe("pf_dora").lang == "pt-br"
    assert voicepacks.describe("my_voice") == voicepacks.VoiceMeta(None, None, None)


def test_the_shipped_pack_holds_what_its_json_lists() -> None:
    pack = voicepacks.builtin_pack()
    assert pack is not None
    meta = json.loads(pack.with_suffix(".json").read_text())
    found = voicepacks.scan(pack)
    assert list(found) == meta["shipped"]
    for lang in ("zh", "en", "en-gb", "es", "fr", "it", "pt-br"):
        assert any(voicepacks.describe(name).lang == lang for name in found)
    assert voicepacks.load(found["zf_xiaoxiao"]).shape == (510, 256)


def test_voices_import_copies_voice_files_and_refuses_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rtts.__main__ import main

    models = tmp_path / "models"
    tarball = kokoro_js_tarball(tmp_path / "kokoro-js-1.2.1.tgz", {"ef_one": style(13)})
    (tmp_path / "notes.bin").write_bytes(b"not a voice")
    status = main(["voices", "import", str(tarball), str(tmp_path / "notes.bin"), "--models-dir", str(models)])
    assert status == 1  # one file refused
    assert (models / "kokoro-js-1.2.1.tgz").read_bytes() == tarball.read_bytes()
    assert not (models / "notes.bin").exists()
    out, err = capsys.readouterr()
    assert "1 voices (ef_one)" in out and "notes.bin" in err
    assert main(["voices", "--models-dir", str(models)]) == 0
    assert "kokoro/ef_one" in capsys.readouterr().out
