"""The container image for linux/arm64, built from the Containerfile and run, under
emulation (issue 33, item 4: "The Containerfile builds for both architectures").

benchmarks/arm64.py installs rtts into an arm64 root by hand; this builds the image a user
builds, with ``podman build --platform linux/arm64`` on this x86 box, every arm64 binary
run by Debian's qemu-user-static through binfmt_misc, and runs it:

1. The base: Debian 12 for arm64 (python3, venv, pip) made by mmdebstrap and imported as
   an arm64 image, as tests/system/test_container.py does for x86 (users get
   python:3.11-slim, which is published for both).
2. The Containerfile, unchanged but for ``--build-arg RTTS_INFERENCE_TIMEOUT=1800``: its
   warm step's synthesis runs ~40 times slower under emulation. pip resolves every
   dependency for aarch64 from the registries, as a user's build does (this host's pip
   settings and CA bundle are lent to the build's RUN steps, not kept in the image).
   The container's view of the host's CPUs in /sys is hidden (``HIDDEN``).
3. The image run as a user runs it (a memory cap, a published port): ``/readyz``,
   unprivileged, no compiler, the native Snake op built for arm64; then ``/tts`` through
   the published port for Mandarin, Japanese and English with no voice named, against
   this box's ``rtts say`` on the same text (samples, SNR, log-mel distance: arm64.py's
   measures), and the files the build prepared are what the requests use (nothing new).

The time each step takes is emulation's, and says nothing of ARM hardware.

    apt-get install -y podman runc slirp4netns mmdebstrap qemu-user-static
    python3 benchmarks/arm64_image.py     # as root; see docs/edge.md ("ARM64") for its wall time

The comparison uses librosa (the ``train`` extra; or a venv with
``--system-site-packages`` and ``pip install librosa``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from arm64 import LOCAL_INDEXES, TEXTS, binfmt_ready, compare, read_wav  # noqa: E402
from latency import cpu_model  # noqa: E402

from tests.ports import free_port  # noqa: E402
from tests.system.test_container import CACHE, CONTAINERS_CONF, Container, Podman, debian_rootfs, made  # noqa: E402

TIMEOUT_S = 1800
# What the build's pip reads on this host (indexes, constraints, a wheelhouse) and the CA
# bundle a site's proxy may need, lent read-only to the RUN steps.
LENT = [Path("/etc/ssl/certs/ca-certificates.crt"), Path("/etc/pip.conf"), Path("/etc/xdg/pip"),
        Path("/root/.config/pip"), *LOCAL_INDEXES]


# onnxruntime's CPU probe (cpuinfo) reads this x86 host's topology in the container's
# /sys and crashes under qemu-user (signal 11 in the build's first `rtts say`; benchmarks/
# arm64.py's chroot leaves /sys out for the same reason). An empty folder over it and the
# probe gives up and falls back, as it did there. A real arm64 box has its own /sys.
HIDDEN = "/sys/devices/system/cpu"


def step(name: str, t0: float) -> float:
    now = time.monotonic()
    print(f"{name}: {(now - t0) / 60:.1f} min", flush=True)
    return now


def build(podman: Podman, work: Path, base: str, image: str, hide: str) -> None:
    src = work / "src"  # the committed tree, as a clean clone has it
    src.mkdir()
    subprocess.run(f"git -C {ROOT} archive HEAD | tar -x -C {src}", shell=True, check=True)
    lent = [f"--volume={p}:{p}:ro" for p in LENT if p.exists()]
    podman("build", "--platform", "linux/arm64", "--layers=false", "--network=host", "--tag", image,
           "--build-arg", f"BASE={base}", "--build-arg", f"RTTS_INFERENCE_TIMEOUT={TIMEOUT_S}", *lent, hide,
           "--file", str(src / "Containerfile"), str(src), timeout=4 * 3600)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="keep the image (localhost/rtts-arm64) afterwards")
    ap.add_argument("--built", action="store_true", help="run the image a --keep run left, without building it")
    # qemu-user's own memory (its translated code) counts in the inference process's RSS,
    # which rtts's memory budget measures: under emulation Japanese did not fit 512 MB
    # ("does not fit the memory budget of 410 MB"), which says nothing of an arm64 box.
    ap.add_argument("--memory", default="1g", help="the container's memory cap [default 1g]")
    args = ap.parse_args()
    problem = binfmt_ready()
    if problem:
        raise SystemExit(f"arm64: {problem} (see benchmarks/arm64.py's docstring)")
    print(f"host: {cpu_model()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="rtts-arm64-image-"))
    (work / "containers.conf").write_text(CONTAINERS_CONF)
    podman = Podman(work / "containers.conf")
    tag = uuid.uuid4().hex[:8]
    base, image, name = f"localhost/rtts-arm64-base:{tag}", "localhost/rtts-arm64", f"rtts-arm64-{tag}"
    t0 = start = time.monotonic()
    (work / "empty").mkdir()
    hide = f"--volume={work / 'empty'}:{HIDDEN}:ro"
    if not args.built:
        tarball = debian_rootfs("arm64")
        t0 = step(f"Debian arm64 base ({tarball}, made once per machine)", t0)
        podman("import", "--arch", "arm64", str(tarball), base, timeout=600)
    container = Container(podman, name, free_port())
    try:
        if not args.built:
            build(podman, work, base, image, hide)
            t0 = step("podman build --platform linux/arm64", t0)
        arch = podman("image", "inspect", "--format", "{{.Architecture}}", image).strip()
        print(f"image architecture: {arch}", flush=True)
        out = work / "out"
        out.mkdir()
        podman("run", "--detach", "--name", name, "--platform", "linux/arm64", f"--memory={args.memory}",
               f"--memory-swap={args.memory}", "--network=slirp4netns",
               "--publish", f"127.0.0.1:{container.port}:8765",
               "--env", f"RTTS_INFERENCE_TIMEOUT={TIMEOUT_S}", hide, image)
        ready = container.wait_ready(timeout=1800)
        t0 = step(f"served: /readyz ready={ready.get('ready')}", t0)
        who = podman("exec", name, "sh", "-c", f"uname -m; id -u; command -v cc gcc || echo no-compiler; "
                                               f"ls {CACHE}/native/").split()
        print(f"inside: {' '.join(who)}", flush=True)
        before = made(container)
        rows = []
        for lang, text in TEXTS.items():
            t1 = time.monotonic()
            url = f"http://127.0.0.1:{container.port}/tts?{urllib.parse.urlencode({'text': text})}"
            with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:
                (out / f"{lang}.wav").write_bytes(r.read())
            took = time.monotonic() - t1
            here = work / f"x86-{lang}.wav"
            subprocess.run([sys.executable, "-m", "rtts", "say", text, "-o", str(here)], check=True,
                           capture_output=True)
            a, b = read_wav(here), read_wav(out / f"{lang}.wav")
            snr, mel = compare(a, b)
            rows.append(f"| {lang} | {b.size / 24000:.2f} s | {b.size - a.size:+d} | {snr:.1f} dB | {mel:.2f} dB "
                        f"| {took:.0f} s |")
            print(rows[-1], flush=True)
        after = made(container)
        print(f"prepared files: {len(before)}; made by the requests: {sorted(after - before) or 'none'}")
        step("speech", t0)
        print("| language | arm64 audio | samples vs x86 | SNR vs x86 | log-mel distance | `/tts` under emulation |")
        print("|---|---|---|---|---|---|")
        print("\n".join(rows))
        print(f"WAVs in {out}; {(time.monotonic() - start) / 60:.0f} min in all")
    finally:
        print(container.logs[-3000:])
        podman("rm", "--force", "--time", "0", name, check=False, timeout=300)
        podman("rmi", "--force", *(() if args.built else (base,)), *(() if args.keep else (image,)), check=False,
               timeout=300)


if __name__ == "__main__":
    main()
