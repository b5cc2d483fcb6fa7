"""The container image (Containerfile), built and run here with podman, as a user runs it
with docker: `--memory=512m --cpus=2 -p …:8765`, then English, Mandarin and Japanese
through the published port, then `podman stop` (SIGTERM to PID 1) and exit code 0.

No registry is reachable here, so the base is Debian 12 made by mmdebstrap (the
Containerfile's BASE build argument; users get python:3.11-slim), and pip installs from
a wheelhouse made on the host (PIP_FIND_LINKS, PIP_NO_INDEX); apt fetches the build
stage's C compiler from Debian's archive. The sandbox needs runc and lower ulimits than
podman's defaults (../shared/research/containers.md): they go in a containers.conf of the
test's own. The test removes its containers and images; the Debian tarball is kept in
/tmp for the next run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from rtts import protocol
from rtts.sound import audio
from tests.conftest import Client
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
PODMAN, MMDEBSTRAP = shutil.which("podman"), shutil.which("mmdebstrap")
pytestmark = pytest.mark.skipif(
    PODMAN is None or MMDEBSTRAP is None or not (shutil.which("runc") and shutil.which("slirp4netns")),
    reason="podman, runc, slirp4netns or mmdebstrap missing: apt-get install podman runc slirp4netns "
    "mmdebstrap",
)

# Debian 12's Python is 3.11, what the default python:3.11-slim base has too.
SUITE = "bookworm"
ROOTFS = Path("/tmp/rtts-test-container") / f"debian-{SUITE}-python.tar"
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
runtime = "runc"
"""
CACHE = "/var/cache/rtts"

# No voice named: the path users take. Each language goes to its default voice.
SPEECH = [
    ("en", "The 10:30 train to Boston leaves from platform 4.", "hibari/heart"),
    ("zh", "欢迎乘坐本次列车，下一站是杭州东站。", "kokoro/zf_xiaoxiao"),
    ("ja", "次は渋谷です。お忘れ物のないようご注意ください。", "kokoro/jf_alpha"),
]


class Podman:
    """The podman command line with this test's containers.conf."""

    def __init__(self, conf: Path) -> None:
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}
        # conmon writes a file named "oom" into its working directory when the container's
        # cgroup kills a process: never into the checkout.
        self.cwd = conf.parent

    def __call__(self, *args: str, timeout: float = 120, check: bool = True, stderr: bool = False) -> str:
        done = subprocess.run([PODMAN, *args], env=self.env, cwd=self.cwd, capture_output=True, text=True,
                              timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
        return done.stdout + done.stderr if stderr else done.stdout


def debian_rootfs(arch: str | None = None) -> Path:
    """A minimal Debian with python3, venv and pip, made once per machine: ~20 s for this
    box's own architecture. For another (``arch``: "arm64", benchmarks/arm64_image.py) the
    packages' scripts run under qemu-user-static, tens of minutes."""
    path = ROOTFS if arch is None else ROOTFS.with_name(f"debian-{SUITE}-{arch}-python.tar")
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        subprocess.run(
            [MMDEBSTRAP, "--quiet", "--format=tar", "--variant=minbase", *([f"--architectures={arch}"] if arch else []),
             "--include=python3,python3-venv,python3-pip,ca-certificates", SUITE, str(tmp)],
            check=True, capture_output=True, timeout=600 if arch is None else 7200,
        )
        os.replace(tmp, path)  # whole or not at all, for a run that comes after
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _wheelhouse(folder: Path) -> Path:
    """The project's dependencies and build backend as wheels, from the host's pip (its
    cache holds them after the suite's install), so the image's pip needs no network. Not
    the project itself: the image builds it from the build context (a wheel of it here
    took 6 s for nothing)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needs = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(folder), *needs],
        check=True, capture_output=True, timeout=900,
    )
    return folder


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    return Podman(conf)


@pytest.fixture(scope="module")
def image(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tag = uuid.uuid4().hex[:8]
    base, name = f"localhost/rtts-test-base:{tag}", f"localhost/rtts-test:{tag}"
    # One thread makes the wheelhouse (~30 s of pip), the other the base image meanwhile:
    # mmdebstrap on a first run, then podman's import of the tarball (~8 s).
    with ThreadPoolExecutor(2) as pool:
        wheels = pool.submit(_wheelhouse, tmp_path_factory.mktemp("wheels"))
        imported = pool.submit(lambda: podman("import", str(debian_rootfs()), base, timeout=300))
    imported.result()
    try:
        # The host's network for the build's RUN steps, and slirp4netns for the container
        # below (rootless podman's default, with `-p` as ever): podman's default bridge adds
        # a network interface to the host, and Chromium then aborts the page loads in flight
        # (net::ERR_NETWORK_CHANGED): why tests/conftest.py groups the browser tests with
        # this one.
        podman(
            "build", "--layers=false", "--network=host", "--file", str(ROOT / "Containerfile"),
            "--tag", name,
            "--build-arg", f"BASE={base}", "--volume", f"{wheels.result()}:/wheels:ro",
            "--build-arg", "PIP_FIND_LINKS=/wheels", "--build-arg", "PIP_NO_INDEX=1",
            str(ROOT), timeout=1200,
        )
        yield name
    finally:
        podman("rmi", "--force", name, base, check=False)


class Container:
    def __init__(self, podman: Podman, name: str, port: int) -> None:
        self.podman, self.name, self.port = podman, name, port

    @property
    def logs(self) -> str:
        return self.podman("logs", self.name, check=False, stderr=True, timeout=30)[-6000:]

    def memory(self) -> str:
        """The container cgroup's own account of its memory (peak, OOM kills; v1 or v2),
        for a failure's message: an inference process the cap killed shows here, while
        podman's OOMKilled speaks of PID 1 only."""
        path = self.podman("inspect", "--format", "{{.State.CgroupPath}}", self.name, check=False)
        path = path.strip("/\n")
        found = []
        v1 = (Path("/sys/fs/cgroup/memory", path), ("memory.max_usage_in_bytes", "memory.oom_control"))
        v2 = (Path("/sys/fs/cgroup", path), ("memory.peak", "memory.events"))
        for folder, names in (v1, v2):
            for name in names:
                try:
                    found.append(f"{name}: {' '.join((folder / name).read_text().split())}")
                except OSError:
                    pass
        return "; ".join(found) or f"no memory files for cgroup {path!r}"

    def state(self) -> dict:
        return json.loads(self.podman("inspect", "--format", "{{json .State}}", self.name))

    def wait_ready(self, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5) as r:
                    return json.loads(r.read())
            except OSError:
                if not self.state().get("Running"):
                    break
                time.sleep(0.2)
        raise AssertionError(f"no /readyz from the container:\n{self.logs}")


@pytest.fixture(scope="module")
def container(podman: Podman, image: str) -> Iterator[Container]:
    name, port = f"rtts-test-{uuid.uuid4().hex[:8]}", free_port()
    podman(
        "run", "--detach", "--name", name, "--memory=512m", "--memory-swap=512m", "--cpus=2",
        "--network=slirp4netns",
        "--publish", f"127.0.0.1:{port}:8765", image,
    )
    try:
        yield Container(podman, name, port)
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)


def test_the_image_is_prepared_runs_unprivileged_and_has_no_compiler(container: Container) -> None:
    ready = container.wait_ready()
    assert ready["ready"] is True, ready
    script = f"id -u; command -v cc gcc || echo no-compiler; ls {CACHE}/native/*.so"
    uid, compiler, *libraries = container.podman("exec", container.name, "sh", "-c", script).split()
    assert uid != "0" and compiler == "no-compiler" and libraries, (uid, compiler, libraries)


def made(container: Container) -> set[str]:
    """Every model, cut, optimized graph and library in the container's cache dir."""
    out = container.podman("exec", container.name, "find", CACHE, "-type", "f", "(", "-name", "*.onnx",
                           "-o", "-name", "*.so", ")")
    return set(out.split())


def test_en_zh_ja_through_the_published_port_under_512m(container: Container) -> None:
    container.wait_ready()
    built = made(container)
    assert any("/kokoro-cut/" in p for p in built) and any("/ort-optimized/hibari-" in p for p in built)
    try:
        with Client(f"ws://127.0.0.1:{container.port}/ws") as client:
            assert isinstance(client.recv(), protocol.Ready)
            for lang, text, voice in SPEECH:
                client.send(type="speak", id=lang, text=text)
                msgs = client.utterance(lang, timeout=180)
                end = msgs[-1]
                assert isinstance(end, protocol.End) and end.reason == "done", end
                frames = [m for m in msgs if isinstance(m, protocol.Audio)]
                samples = audio.decode(b"".join(f.data for f in frames), "pcm16")
                assert len(samples) > 24000 * 0.8 and float(np.sqrt(np.mean(samples**2))) > 0.01, lang
                marks = [(m.voice, m.lang) for m in msgs if isinstance(m, protocol.Mark)]
                assert marks and set(marks) == {(voice, lang)}, marks
    except (AssertionError, OSError, TimeoutError) as exc:
        state = container.state()
        evidence = f"OOMKilled={state.get('OOMKilled')}; {container.memory()}"
        raise AssertionError(f"{exc!r}\n{evidence}\n{container.logs}") from exc
    # What the first requests would have waited for was made when the image was built:
    # the requests made nothing new (an mtime the image layer did not keep would have).
    assert made(container) == built, container.logs


def test_podman_stop_ends_it_with_exit_code_0(container: Container) -> None:
    container.wait_ready()
    started = time.monotonic()
    container.podman("stop", "--time", "20", container.name, timeout=60)
    assert time.monotonic() - started < 15  # SIGTERM did it, not the SIGKILL after 20 s
    state = container.state()
    assert state["ExitCode"] == 0 and not state["OOMKilled"], (state, container.logs)
    assert " rtts: stopped" in container.logs, container.logs
