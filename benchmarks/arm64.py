"""rtts on linux/aarch64, verified under emulation (issue 33, item 4): install, the native
Snake op, and Mandarin, Japanese and English speech against this x86 box's.

No ARM machine is reachable from here, so the check runs in a Debian 12 arm64 root made by
mmdebstrap and entered with chroot, every arm64 binary run by Debian's qemu-user-static
through binfmt_misc. It says whether the project installs and speaks there, and whether
the speech is the same; it says nothing of speed on real ARM hardware.

1. The root (cached in --root): python3, venv, pip, gcc, libportaudio2.
2. This checkout (``git archive HEAD``) installed into a venv there with ``pip install
   .[play]``: every dependency resolved for aarch64; which ones pip had to build
   from source is printed.
3. The native Snake op built there by the arm64 gcc and checked against the graph form,
   bit for bit, on a Mandarin and a Japanese sentence.
4. ``rtts say`` there and here on the same sentences (no voice named: Kokoro zf_xiaoxiao,
   jf_alpha, Hibari heart): their lengths, and how far apart the two waveforms are (SNR of
   the arm64 audio against the x86 one, and the log-mel distance in dB).

Needs root, mmdebstrap and qemu-user-static with the aarch64 handler registered with the
F flag (so a chroot finds the interpreter):

    apt-get install -y mmdebstrap qemu-user-static
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
    python3 benchmarks/arm64.py            # ~30-40 min on 2 cores, most of it pip under emulation
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from latency import cpu_model  # noqa: E402

PACKAGES = "python3,python3-venv,python3-pip,python3-dev,ca-certificates,libportaudio2,libgomp1,gcc,libc6-dev"
QEMU = Path("/usr/bin/qemu-aarch64-static")
BINFMT = Path("/proc/sys/fs/binfmt_misc")
# The aarch64 ELF magic and mask, as Debian's qemu-user-static registers them, with F
# (the interpreter opened now, so a chroot without it still runs arm64 binaries).
_REGISTER = (":qemu-aarch64:M::\\x7fELF\\x02\\x01\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02\\x00\\xb7\\x00:"
             "\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfe\\xff\\xff\\xff:"
             f"{QEMU}:FPC")
TEXTS = {
    "zh": "各位旅客请注意，开往上海虹桥的G1023次列车现在开始检票。",
    "ja": "まもなく一番線に電車がまいります。黄色い線までお下がりください。",
    "en": "The 10:30 train to Boston leaves from platform 4.",
}
# The host's pip settings (indexes, a local wheelhouse), so pip there finds what pip here does.
PIP_CONFIGS = [Path("/etc/pip.conf"), Path("/etc/xdg/pip/pip.conf"), Path("/etc/xdg/pip/constraints.txt"),
               Path("/root/.config/pip/pip.conf")]
LOCAL_INDEXES = [Path("/opt/pypi"), Path("/opt/pypi-more"), Path("/opt/wheels")]


# Kokoro with its Snakes as the native op (built there by the arm64 gcc) against the graph
# form, on the same sentences: the audio must be the same in every sample (as
# tests/live/test_snake_live.py asks on x86; that test's 60 s call timeout is too short
# under emulation, so the check runs here with a longer one).
_SNAKE_CHECK = """
import os, time
from pathlib import Path
import numpy as np
from rtts.host.client import Host
from rtts.engines.voices import VoiceRegistry, host_ops
cache = Path("/opt/cache")
def loaded(env):
    reg = VoiceRegistry.discover(None, cache, threads=2, host=Host(host_ops(), call_timeout_s=1200))
    os.environ.update(env)
    reg.engines["kokoro"].load()
    for k in env:
        os.environ.pop(k)
    return reg
native, graph = loaded({}), loaded({"RTTS_NATIVE_SNAKE": "0"})
print("native library:", native.engines["kokoro"]._decoder._spec[4], "- graph form:", graph.engines["kokoro"]._decoder._spec[4])
for lang, vid, text in [("zh", "kokoro/zf_xiaoxiao", "欢迎光临。"), ("ja", "kokoro/jf_alpha", "東京駅へようこそ。")]:
    a, b = (np.concatenate(list(r.engine_for(r.get(vid)).synthesize(text, r.get(vid), lang, 1.0))) for r in (native, graph))
    same = a.size == b.size and float(np.max(np.abs(a - b))) == 0.0
    print(f"{lang} {text}: {a.size} and {b.size} samples, {'the same in every sample' if same else 'DIFFERENT'}")
"""


def binfmt_ready() -> str | None:
    """None when an arm64 chroot can run, else what is missing."""
    if not QEMU.exists():
        return "qemu-user-static is not installed"
    if not (BINFMT / "register").exists():
        subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)], check=False)
    entry = BINFMT / "qemu-aarch64"
    if entry.exists() and "flags: " in (text := entry.read_text()) and "F" not in text.split("flags: ")[1].split()[0]:
        entry.write_text("-1")  # registered without F: a chroot would not find the interpreter
    if not entry.exists():
        try:
            (BINFMT / "register").write_text(_REGISTER)  # the kernel reads the \\x escapes itself
        except OSError as exc:
            return f"cannot register the aarch64 handler: {exc}"
    return None


def make_root(root: Path) -> None:
    if (root / "usr" / "bin" / "python3").exists():
        return
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(["mmdebstrap", "--quiet", "--mode=root", "--architectures=arm64", "--variant=minbase",
                    f"--include={PACKAGES}", "bookworm", str(tmp)], check=True)
    tmp.rename(root)


@contextlib.contextmanager
def mounted(root: Path) -> Iterator[None]:
    # Not /sys: onnxruntime's CPU probe (cpuinfo) reads the x86 host's topology there and
    # crashes under qemu-user at import (seen here: signal 11); without it, it falls back.
    binds = [(Path("/proc"), root / "proc"), (Path("/dev"), root / "dev")]
    binds += [(p, root / p.relative_to("/")) for p in LOCAL_INDEXES if p.is_dir()]
    done = []
    try:
        for src, dst in binds:
            dst.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", "--bind", str(src), str(dst)], check=True)
            done.append(dst)
        shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")
        # The host's CA bundle: where the registries are reached through a proxy of the
        # site's, its certificate is in this bundle and not in Debian's.
        shutil.copy("/etc/ssl/certs/ca-certificates.crt", root / "etc" / "ssl" / "certs" / "ca-certificates.crt")
        for conf in PIP_CONFIGS:
            if conf.exists():
                (root / conf.relative_to("/")).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(conf, root / conf.relative_to("/"))
        yield
    finally:
        for dst in reversed(done):
            subprocess.run(["umount", "-l", str(dst)], check=False)


def inside(root: Path, script: str, timeout: float = 7200) -> tuple[str, float]:
    t0 = time.monotonic()
    done = subprocess.run(["chroot", str(root), "/bin/sh", "-c", script], capture_output=True, text=True,
                          timeout=timeout)
    took = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"in the arm64 root, `{script}` failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                         f"{done.stderr[-3000:]}")
    return done.stdout + done.stderr, took


def read_wav(path: Path) -> np.ndarray:
    import soundfile as sf

    audio, _ = sf.read(path, dtype="float32")
    return audio


def compare(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """SNR (dB) of ``b`` against ``a``, and their log-mel distance (mean |dB|)."""
    n = min(a.size, b.size)
    a, b = a[:n], b[:n]
    snr = 10 * np.log10(np.sum(a**2) / max(np.sum((a - b) ** 2), 1e-20))
    import librosa

    ma, mb = (librosa.power_to_db(librosa.feature.melspectrogram(y=x, sr=24000, n_mels=80), ref=1.0, top_db=None)
              for x in (a, b))
    floor = ma.max() - 80
    return float(snr), float(np.mean(np.abs(np.maximum(ma, floor) - np.maximum(mb, floor))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path("/tmp/rtts-arm64/root"))
    args = ap.parse_args()
    problem = binfmt_ready()
    if problem:
        raise SystemExit(f"arm64: {problem} (see this script's docstring)")
    print(f"host: {cpu_model()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    args.root.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    make_root(args.root)
    print(f"arm64 root: {time.monotonic() - t0:.0f} s", flush=True)
    src = args.root / "opt" / "rtts-src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    subprocess.run(f"git -C {ROOT} archive HEAD | tar -x -C {src}", shell=True, check=True)
    # A fresh cache: a failed native build is remembered there, and one made while something
    # else was wrong (a mounted /sys crashed the build's child) would stand for this run.
    shutil.rmtree(args.root / "opt" / "cache", ignore_errors=True)
    out = args.root / "opt" / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    here = out.with_name("x86")
    shutil.rmtree(here, ignore_errors=True)
    here.mkdir()
    with mounted(args.root):
        arch, _ = inside(args.root, "uname -m && python3 --version")
        print(f"inside: {' '.join(arch.split())}", flush=True)
        log, took = inside(args.root, "python3 -m venv /opt/rtts && /opt/rtts/bin/pip install --progress-bar off "
                                      "'/opt/rtts-src[play]' 2>&1")
        built = sorted({line.split("Building wheel for ")[1].split()[0] for line in log.splitlines()
                        if "Building wheel for " in line})
        print(f"pip install .[play]: {took / 60:.1f} min; built from source: {', '.join(built) or 'nothing'}",
              flush=True)
        (out / "pip.log").write_text(log)
        rows = []
        for lang, text in TEXTS.items():
            _, took = inside(args.root, f"cd /opt && /opt/rtts/bin/rtts say --cache-dir /opt/cache --inference-timeout 900 '{text}' -o /opt/out/{lang}.wav")
            subprocess.run([sys.executable, "-m", "rtts", "say", text, "-o", str(here / f"{lang}.wav")], check=True,
                           capture_output=True)
            a, b = read_wav(here / f"{lang}.wav"), read_wav(out / f"{lang}.wav")
            snr, mel = compare(a, b)
            rows.append(f"| {lang} | {b.size / 24000:.2f} s | {b.size - a.size:+d} | {snr:.1f} dB | {mel:.2f} dB | {took:.0f} s |")
            print(rows[-1], flush=True)
        (args.root / "tmp" / "snake_check.py").write_text(_SNAKE_CHECK)
        snake, took = inside(args.root, "cd /opt && /opt/rtts/bin/python /tmp/snake_check.py 2>/dev/null")
        print(f"native Snake op, built by the arm64 gcc, against the graph form ({took / 60:.1f} min):\n{snake.strip()}")
    print("| language | arm64 audio | samples vs x86 | SNR vs x86 | log-mel distance | `rtts say` under emulation |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
