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

``scan`` names the voices in a file by reading headers and sizes only (a tarball's
member list); ``load`` reads one matrix. Both raise ``ValueError`` for a file that is
not a style pack; the caller logs it with the file's name and carries on.

``describe`` says what a voice's name tells (Kokoro's names are ``<lang><gender>_<name>``),
completed by the grades the kokoro-js package publishes (``models/kokoro-voices.json``).
"""

from __future__ import annotations

import json
import logging
import tarfile
import zipfile
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import IO

import numpy as np

__all__ = [
    "PACK_FILE",
    "ROWS",
    "STYLE_DIM",
    "StyleSource",
    "VoiceMeta",
    "builtin_pack",
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


@dataclass(frozen=True)
class StyleSource:
    """Where one voice's matrix lives: a file, and the array or member inside it."""

    path: Path
    member: str | None = None  # npz array name or tar member; None for a whole-file .npy/.bin


def is_candidate(path: Path) -> bool:
    """A file whose name says it may hold Kokoro styles (its content decides)."""
    return path.name.endswith(_SUFFIXES)


def scan(path: Path) -> dict[str, StyleSource]:
    """The voices in ``path``, by name, reading headers only.

    Raises ValueError when the file cannot be read or holds no 510x256 float style.
    Arrays of other shapes inside an npz are ignored (an npz may carry other data).
    """
    try:
        found = _scan(path)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise ValueError(f"not a readable Kokoro voice file: {exc}") from exc
    if not found:
        raise ValueError("no 510x256 Kokoro style vector in it")
    return found


def _scan(path: Path) -> dict[str, StyleSource]:
    name = path.name
    if name.endswith(_TARBALL_SUFFIXES):
        with tarfile.open(path) as tar:
            return {
                Path(m.name).stem: StyleSource(path, m.name)
                for m in tar.getmembers()
                if m.isfile() and m.name.endswith(".bin") and m.size == RAW_BYTES
            }
    if path.suffix == ".npy":
        with path.open("rb") as f:
            return {path.stem: StyleSource(path)} if _is_style(*_npy_header(f)) else {}
    if path.suffix == ".npz" or zipfile.is_zipfile(path):
        found = {}
        with zipfile.ZipFile(path) as zf:
            for member in zf.namelist():
                if member.endswith(".npy"):
                    with zf.open(member) as f:
                        if _is_style(*_npy_header(f)):
                            key = member.removesuffix(".npy")
                            found[key] = StyleSource(path, key)
        return found
    size = path.stat().st_size
    if size != RAW_BYTES:
        raise ValueError(f"{size} bytes; a kokoro-js voice is raw float32 510x256, {RAW_BYTES} bytes")
    return {path.stem: StyleSource(path)}


def load(source: StyleSource) -> np.ndarray:
    """The (510, 256) float32 matrix of one voice; ValueError when it cannot be read."""
    path, member = source.path, source.member
    try:
        if path.name.endswith(_TARBALL_SUFFIXES):
            with tarfile.open(path) as tar:
                f = tar.extractfile(member or "")
                if f is None:
                    raise ValueError(f"{member} is not a file")
                array = _raw(f.read())
        elif path.suffix == ".npy":
            array = np.load(path, allow_pickle=False)
        elif member is not None:
            with np.load(path, allow_pickle=False) as npz:
                array = npz[member]
        else:
            array = _raw(path.read_bytes())
    except (OSError, KeyError, EOFError, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise ValueError(f"cannot read Kokoro voice {member or path.stem} from {path}: {exc}") from exc
    if not _is_style(array.shape, array.dtype):
        raise ValueError(f"{path}: {member or path.stem} has shape {array.shape}, expected (510, 256)")
    style = np.ascontiguousarray(array.reshape(ROWS, STYLE_DIM), dtype=np.float32)
    if not np.isfinite(style).all():
        raise ValueError(f"{path}: {member or path.stem} holds NaN or infinite values")
    return style


def _raw(data: bytes) -> np.ndarray:
    if len(data) != RAW_BYTES:
        raise ValueError(f"{len(data)} bytes, expected {RAW_BYTES}")
    return np.frombuffer(data, dtype="<f4").reshape(ROWS, STYLE_DIM)


def _npy_header(f: IO[bytes]) -> tuple[tuple[int, ...], np.dtype]:
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
    else:
        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    return shape, dtype


def _is_style(shape: tuple[int, ...], dtype: np.dtype) -> bool:
    return shape in ((ROWS, 1, STYLE_DIM), (ROWS, STYLE_DIM)) and dtype.kind == "f"


# ------------------------------------------------------------ the shipped pack


def _data_dir() -> Path:
    """models/ in a checkout, rtts/_models/ inside the wheel (pyproject's force-include)."""
    packaged = Path(str(resources.files("rtts"))) / "_models"
    if (packaged / PACK_FILE).is_file():
        return packaged
    return Path(__file__).resolve().parent.parent / "models"


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
