"""Kokoro voice files in every form users have them (rtts.engines.voicepacks), and their discovery.

Pure: the files are made here; discovery reads headers only and loads no model.
"""

from __future__ import annotations

import io
import json
import logging
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest

from rtts.engines import voicepacks
from rtts.engines.voices import VoiceRegistry


def builtin_styles() -> set[str]:
    from rtts.engines.kokoro import KokoroPack

    shipped = voicepacks.builtin_pack()
    assert shipped is not None
    return set(voicepacks.scan(shipped)) | set(voicepacks.scan(KokoroPack.find().voices))


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


# ------------------------------------------------------------ hostile voice files (issue 20)


class Zeros(io.RawIOBase):
    """A stream of ``size`` zero bytes, made as read (no 32 MiB buffer in the test)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        n = min(len(b), self.left)
        b[:n] = bytes(n)
        self.left -= n
        return n


def peak_bytes(fn) -> int:  # type: ignore[no-untyped-def]
    """The most Python memory ``fn()`` held at once (numpy's buffers included)."""
    import tracemalloc

    tracemalloc.start()
    try:
        try:
            fn()
        except ValueError:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_tarball_naming_a_voice_twice_is_refused_and_a_voice_read_is_bounded(tmp_path: Path) -> None:
    """Bug 9: a second member of a valid voice's name, holding 1.5 GiB of zeros, was what
    extractfile(name) read, whole, before any size check, on every request."""
    path = tmp_path / "kokoro-js-evil.tgz"
    member = "package/voices/af_dup.bin"
    with tarfile.open(path, "w:gz") as tar:
        data = style(20).astype("<f4").tobytes()
        info = tarfile.TarInfo(member)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(member)
        info.size = 32 << 20  # enough to show; the attack's 1.5 GiB costs seconds to make
        tar.addfile(info, Zeros(info.size))
    assert path.stat().st_size < 1 << 20
    with pytest.raises(ValueError, match="af_dup.bin is in it twice"):
        voicepacks.scan(path)
    # Read anyway (the file swapped after discovery): one voice's bytes, not the copy's.
    assert peak_bytes(lambda: voicepacks.load(voicepacks.StyleSource(path, member))) < 4 << 20


def gzip_of(*parts: bytes | int) -> bytes:
    """A gzip stream of ``parts``, an int standing for that many zero bytes: made as
    concatenated gzip members of 1 MiB of zeros each (1 KB), so 1 GiB costs nothing."""
    import gzip

    mib = gzip.compress(bytes(1 << 20))
    out = []
    for part in parts:
        if isinstance(part, int):
            out.append(mib * (part >> 20) + gzip.compress(bytes(part & ((1 << 20) - 1))))
        else:
            out.append(gzip.compress(part))
    return b"".join(out)


def test_a_tarball_header_claiming_a_huge_size_is_not_read(tmp_path: Path) -> None:
    """A pax header is read whole by tarfile, whatever size it claims (1.5 GiB here, of
    which 64 MiB are there); and a voice past MAX_UNPACKED bytes is not unpacked to."""
    header = tarfile.TarInfo("././@PaxHeader")
    header.type = tarfile.XHDTYPE
    header.size = 3 << 29
    path = tmp_path / "pax.tgz"
    path.write_bytes(gzip_of(header.tobuf(format=tarfile.USTAR_FORMAT), 64 << 20))
    assert path.stat().st_size < 1 << 20
    assert peak_bytes(lambda: voicepacks.scan(path)) < 4 << 20
    with pytest.raises(ValueError, match="claims 1610612736 bytes"):
        voicepacks.scan(path)
    big = tarfile.TarInfo("package/model.onnx")
    big.size = voicepacks.MAX_UNPACKED
    late = tarfile.TarInfo("package/voices/af_late.bin")
    late.size = voicepacks.RAW_BYTES
    path = tmp_path / "big.tgz"
    path.write_bytes(
        gzip_of(
            big.tobuf(format=tarfile.USTAR_FORMAT),
            big.size,
            late.tobuf(format=tarfile.USTAR_FORMAT) + style(22).astype("<f4").tobytes() + bytes(1024),
        )
    )
    with pytest.raises(ValueError, match="unpacks to more than"):
        voicepacks.scan(path)


def test_non_regular_tar_members_are_not_voices(tmp_path: Path) -> None:
    path = tmp_path / "links.tgz"
    with tarfile.open(path, "w:gz") as tar:
        data = style(23).astype("<f4").tobytes()
        info = tarfile.TarInfo("package/voices/af_real.bin")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for kind, name in ((tarfile.SYMTYPE, "af_sym"), (tarfile.LNKTYPE, "af_hard")):
            link = tarfile.TarInfo(f"package/voices/{name}.bin")
            link.type, link.linkname = kind, "package/voices/af_real.bin"
            tar.addfile(link)
    assert list(voicepacks.scan(path, read=True)) == ["af_real"]


def test_styles_outside_the_range_of_real_ones_are_refused() -> None:
    """Bug 19's edge: a style of 3e38 (finite) made the model's audio NaN, and trim_silence
    raised IndexError. The bound is learned from the styles rtts ships and installs."""
    from rtts.engines.kokoro import KokoroPack

    widest = 0.0
    for pack in (voicepacks.builtin_pack(), KokoroPack.find().voices):
        assert pack is not None
        for name, source in voicepacks.scan(pack).items():
            widest = max(widest, float(np.abs(voicepacks.load(source)).max()))
    assert 2.5 < widest < voicepacks.MAX_ABS / 3  # a generous margin over every real style
    voicepacks.check_style(style(24) / 4 * voicepacks.MAX_ABS / 4, "af_ok")
    for bad, why in ((3e38, "up to 3e\\+38"), (np.inf, "infinite"), (np.nan, "NaN")):
        s = style(25)
        s[7, 9] = bad
        with pytest.raises(ValueError, match=why):
            voicepacks.check_style(s, "af_bad")
    with pytest.raises(ValueError, match="infinite"):  # beyond float32: inf once converted
        voicepacks.check_style(np.full((510, 256), 1e300), "af_wide")


@pytest.mark.parametrize(
    "name", ["../../x/af_weird name", "af_weird name", "a/b", "", ".hidden", "x" * 65, "af\nheart", "ü_voice"]
)
def test_voice_names_are_one_safe_segment(name: str) -> None:
    with pytest.raises(ValueError, match="cannot name a voice"):
        voicepacks.check_name(name)


def test_voice_names_kokoro_and_users_give_are_taken() -> None:
    for name in ("af_heart", "zf_xiaoxiao", "my_voice", "flat", "Blend-2", "x" * 64):
        assert voicepacks.check_name(name) == name


def hostile_files(root: Path) -> dict[str, str]:
    """Files that once passed for voices, by name, with what they are refused for."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "lexicon.txt").write_bytes(b"Nguyen = Win\n".ljust(voicepacks.RAW_BYTES, b" "))
    nan = style(26)
    nan[0, 0] = np.nan
    kokoro_js_bin(root / "af_nan.bin", nan)
    np.save(root / "af_huge.npy", np.full((510, 1, 256), 3e38, np.float32))
    np.savez(root / "weird.npz", **{"../../x/af_weird name": style(27)})
    kokoro_js_bin(root / "af_weird name.bin", style(28))
    return {
        "lexicon.txt": "not a Kokoro voice file name",
        "af_nan.bin": "NaN",
        "af_huge.npy": "up to 3e\\+38",
        "weird.npz": "cannot name a voice",
        "af_weird name.bin": "cannot name a voice",
    }


def test_voices_import_refuses_what_is_not_a_good_voice_and_keeps_what_is_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bug 10: a padded text file named lexicon.txt replaced the lexicon; NaN styles and the
    name ``../../x/af_weird name`` were taken."""
    from rtts.__main__ import main

    models = tmp_path / "models"
    models.mkdir()
    (models / "lexicon.txt").write_text("Xiaomi = /ʃaʊmi/\n")
    bad = hostile_files(tmp_path / "in")
    for name, why in bad.items():
        assert main(["voices", "import", str(tmp_path / "in" / name), "--force", "--models-dir", str(models)]) == 1
        err = capsys.readouterr().err
        assert re.search(why, err), (name, err)
    assert sorted(p.name for p in models.iterdir()) == ["lexicon.txt"]  # no staging left either
    assert (models / "lexicon.txt").read_text() == "Xiaomi = /ʃaʊmi/\n"


def test_voices_import_replaces_a_file_only_with_force_and_never_writes_through_a_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rtts.__main__ import main

    models = tmp_path / "models"
    first, second = style(29), style(30)
    kokoro_js_bin(tmp_path / "af_mine.bin", first)
    assert main(["voices", "import", str(tmp_path / "af_mine.bin"), "--models-dir", str(models)]) == 0
    kokoro_js_bin(tmp_path / "af_mine.bin", second)
    assert main(["voices", "import", str(tmp_path / "af_mine.bin"), "--models-dir", str(models)]) == 1
    assert "already exists (--force replaces it)" in capsys.readouterr().err
    assert (models / "af_mine.bin").read_bytes() == first.astype("<f4").tobytes()
    assert main(["voices", "import", str(tmp_path / "af_mine.bin"), "--force", "--models-dir", str(models)]) == 0
    assert (models / "af_mine.bin").read_bytes() == second.astype("<f4").tobytes()
    # A link where the file goes is replaced, not written through.
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"keep")
    (models / "af_link.bin").symlink_to(outside)
    kokoro_js_bin(tmp_path / "af_link.bin", first)
    assert main(["voices", "import", str(tmp_path / "af_link.bin"), "--force", "--models-dir", str(models)]) == 0
    assert outside.read_bytes() == b"keep" and not (models / "af_link.bin").is_symlink()
    assert sorted(p.name for p in models.iterdir()) == ["af_link.bin", "af_mine.bin"]


def test_discovery_refuses_the_same_files_import_does(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """One validator: what `rtts voices import` refuses is skipped when dropped in."""
    bad = hostile_files(tmp_path)
    kokoro_js_bin(tmp_path / "af_good.bin", style(31))
    with caplog.at_level(logging.WARNING):
        registry = VoiceRegistry.discover(tmp_path, tmp_path / "cache", threads=1)
    assert "kokoro/af_good" in registry.voices
    ours = [v for v in registry.voices if v.startswith("kokoro/") and v.split("/", 1)[1] not in builtin_styles()]
    assert ours == ["kokoro/af_good"]
    for name, why in bad.items():
        if name != "lexicon.txt":  # not a voice file name: no Kokoro scanner looks at it
            (line,) = [r.getMessage() for r in caplog.records if f"{name}:" in r.getMessage()]
            assert re.search(why, line), line


def test_fifos_and_devices_in_the_models_dir_do_not_hang_discovery(tmp_path: Path) -> None:
    """Bug 18: a FIFO or a link to /dev/zero hung `rtts voices`, start-up and SIGHUP."""
    import os
    import threading
    import time

    for name in ("fifo.bin", "fifo.npz", "fifo.tgz", "fifo.onnx"):
        os.mkfifo(tmp_path / name)
    for name in ("zero.bin", "zero.npz", "zero.tar", "zero.npy", "zero.onnx", "zero.onnx.json"):
        (tmp_path / name).symlink_to("/dev/zero")
    (tmp_path / "dangling.bin").symlink_to(tmp_path / "nowhere")
    kokoro_js_bin(tmp_path / "af_good.bin", style(32))
    found: list[VoiceRegistry] = []
    started = time.monotonic()
    worker = threading.Thread(
        target=lambda: found.append(VoiceRegistry.discover(tmp_path, tmp_path / "cache", threads=1)), daemon=True
    )
    worker.start()
    worker.join(5)
    assert found, "discovery hung"
    assert time.monotonic() - started < 1.0
    assert "kokoro/af_good" in found[0].voices
    # Read directly (`rtts voices import`, or a file swapped after discovery): refused at once.
    for name in ("fifo.bin", "zero.npz"):
        with pytest.raises(ValueError, match="not a regular file"):
            voicepacks.scan(tmp_path / name)
    with pytest.raises(ValueError, match="not a regular file"):
        voicepacks.load(voicepacks.StyleSource(tmp_path / "fifo.bin"))
    from rtts.engines.piper import PiperConfig

    for name in ("fifo.onnx", "zero.onnx.json"):  # a Piper config swapped after discovery's is_file()
        with pytest.raises(ValueError, match="not a regular file"):
            PiperConfig.from_json(tmp_path / name)


def test_a_lexicon_that_is_a_fifo_or_a_device_is_empty_at_once(tmp_path: Path) -> None:
    """The lexicon is read on the event loop for each new session: same hazard as bug 18."""
    import os

    from rtts.text.lexicon import Lexicon

    os.mkfifo(tmp_path / "fifo.txt")
    (tmp_path / "zero.txt").symlink_to("/dev/zero")
    assert not Lexicon.load(tmp_path / "fifo.txt") and not Lexicon.load(tmp_path / "zero.txt")


def test_a_zip_with_a_huge_directory_is_refused_unread(tmp_path: Path) -> None:
    import zipfile

    path = tmp_path / "many.npz"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(5000):  # 1.25 MB of directory
            zf.writestr(f"{i:05d}" + "x" * 200, b"")
    with pytest.raises(ValueError, match="zip directory of"):
        voicepacks.scan(path)


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [(10, 99, "compression method"), (8, 1, "encrypted"), (6, 99, "zip file version")],
)
def test_an_npz_zipfile_cannot_open_is_a_broken_file_not_a_crash(
    tmp_path: Path, field: int, value: int, why: str
) -> None:
    """zipfile raises NotImplementedError or RuntimeError for these: that escaped discovery
    (found by flipping bytes of good files), so one such file stopped the server starting."""
    import struct

    path = tmp_path / "odd.npz"
    np.savez(path, af_one=style(33))
    data = bytearray(path.read_bytes())
    at = data.rfind(b"PK\x01\x02")  # the member's central directory entry
    struct.pack_into("<H", data, at + field, value)
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=why):
        voicepacks.scan(path, read=True)
    registry = VoiceRegistry.discover(tmp_path, tmp_path / "cache", threads=1)
    assert "kokoro/af_one" not in registry.voices
