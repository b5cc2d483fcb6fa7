"""Shared fixtures: a real rtts server in a background thread, and a small client.

Tests come in three tiers, one folder each, and carry its marker:

* ``tests/unit``: pure logic (protocol, session, text, audio, scheduling with fakes); seconds;
* ``tests/live``: a real server or real models and real clients;
* ``tests/system``: the browser (Debian's chromium), nginx, systemd, the soak.

``python -m pytest tests/unit`` (or ``-m unit``) runs the first alone; ``python -m pytest`` all.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from websockets.sync.client import ClientConnection, connect

from rtts import protocol
from rtts.config import Config
from rtts.serve.server import RttsServer
from rtts.service import Service
from tests.box_turns import BoxTurns

_TIERS = ("unit", "live", "system")


# ``python -m pytest`` runs on two workers (pyproject.toml: ``-n 2 --dist loadgroup
# --no-loadscope-reorder``, by pytest-xdist), each test module on one of them, in the order
# set here. The modules that keep devices in step to the ms (kiosks, sync.js, the headless
# players) failed beside another worker's load, so they are one group and come last, and
# have the box alone (tests/box_turns.py): the other worker's tests wait meanwhile.
# (Giving them a higher CPU priority did not help: beside a busy core, at nice -10, a page's
# output timestamps still wandered by tens of ms.) They are kept short: the kiosk pages
# and the headless players share one Redis and two instances for their minutes of Mandarin
# (test_in_step_across_instances.py), and `rtts play` writing to a file, which keeps no
# device in step, runs with the others (test_player_live.py).
# The modules that load the whole box by design (the container build, the capped soak,
# the soak) are one group too, so they never run together, and come first. The other pages
# in Chromium join them: podman's default bridge added a network interface when it started
# a container, and Chromium then aborted the page loads in flight (net::ERR_NETWORK_CHANGED;
# a kiosk test failed so on the other worker). The container test now runs podman on
# slirp4netns, which adds none; the pages have not yet been run beside it. Between them, the longest modules first (system, then
# live, then unit), so the two workers end together.
_IN_STEP = frozenset({"test_in_step_across_instances.py", "test_headless_players.py", "test_kiosk_sync.py",
                      "test_sync_js.py"})
_FIRST_IN_TURN = frozenset({
    "test_container.py", "test_capped_soak.py", "test_soak.py",
    "test_browser.py", "test_word_highlight.py", "test_kiosk_layout.py", "test_kiosk_channels.py",
})
_ORDER = {"system": 1, "live": 2, "unit": 3}


def _rank(item: pytest.Item) -> int:
    name = item.path.name
    return 0 if name in _FIRST_IN_TURN else 4 if name in _IN_STEP else _ORDER.get(item.path.parent.name, 3)


# Before xdist's own hook, which reads the group marks (and names each item by its group).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = item.path.parent.name
        if tier in _TIERS:
            item.add_marker(getattr(pytest.mark, tier))
        # Every other module is a group of its own, so its module-scoped fixtures (a
        # browser, a server) are set up once, on one worker.
        name = item.path.name
        group = ("in_step" if name in _IN_STEP else "first_in_turn" if name in _FIRST_IN_TURN
                 else item.path.relative_to(_ROOT).as_posix())
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=_rank)  # stable: each module's own order is kept


# The in-step modules have the box alone (tests/box_turns.py): each worker's side of the lock.
_TURNS = pytest.StashKey[BoxTurns]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test of an in-step module runs with the other worker's held back; any other
    beside the other worker's, unless that one is in step (its module's fixtures are set
    up and torn down within its tests' turns)."""
    turns = item.config.stash.get(_TURNS, None)
    if turns is None:  # one process (-n 0): nothing runs beside it
        yield
    elif item.path.name in _IN_STEP:
        turns.take_alone()
        yield
    else:
        with turns.shared():
            yield


# Hypothesis' per-example deadline is a timing assertion: on a busy 2-core machine it fails
# tests that are correct. Speed is measured by benchmarks, not tests.
settings.register_profile("rtts", deadline=None)
settings.load_profile("rtts")

_ROOT = Path(__file__).resolve().parent.parent
# The Kokoro model is assembled from its PyPI parts once per test run into this folder.
_CACHE = _ROOT / ".pytest-cache-models"


@pytest.fixture(scope="session")
def models_cache() -> Path:
    """The cache directory the test servers use (what engines derive is kept there)."""
    return _CACHE


# ---------------------------------------------------------------- the checkout stays as it was

# A test run must leave the checkout as it found it (CI runs on a clean clone, which once
# came out with five screenshots rewritten). The state of every tracked file that differs
# from HEAD and of every untracked file that .gitignore does not cover, with their
# contents' hashes, is taken at the start and again at the end; a run that changed it
# fails and names the files. Outside a git checkout (an unpacked sdist) there is nothing to
# compare. A file edited by hand during the run is named too: that is the price of a check
# that cannot miss what a test wrote.
_TREE_CHANGES = pytest.StashKey[list[str]]()
_TREE_BEFORE = pytest.StashKey["dict[str, str] | None"]()
SCREENSHOTS_ENV = "RTTS_UPDATE_SCREENSHOTS"
_HASH_LIMIT = 16 << 20


def _tree_state() -> dict[str, str] | None:
    """Path → "status hash" of what differs from HEAD (None: not a git checkout)."""
    try:
        # --no-optional-locks: never take the index lock a developer's own git command may want.
        out = subprocess.run(["git", "--no-optional-locks", "-C", str(_ROOT), "status", "--porcelain=v1", "-z",
                              "--untracked-files=all"], capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    state = {}
    entries = iter(out.decode("utf-8", "surrogateescape").split("\0"))
    for entry in entries:
        if not entry:
            continue
        status, path = entry[:2], entry[3:]
        if status[0] in "RC":
            next(entries, None)  # a rename's second field is where it came from
        try:
            st = (_ROOT / path).stat()
            # Big files (a model dropped in the tree) by size and time, not read twice a run.
            digest = (f"{st.st_size} {st.st_mtime_ns}" if st.st_size > _HASH_LIMIT
                      else hashlib.sha256((_ROOT / path).read_bytes()).hexdigest())
        except OSError:
            digest = "-"  # deleted, or a folder (a submodule)
        state[path] = f"{status} {digest}"
    return state


def _is_worker(config: pytest.Config) -> bool:
    """An xdist worker: the controller alone compares the tree, before any worker starts and
    after every one has ended (a worker's end would see another's test still writing)."""
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """Stop at once where the installed rtts is not a package (an editable install whose
    .pth names a checkout that is gone, as a copied environment's did): the tests that
    start ``rtts`` and ``rtts play`` as programs then failed one by one, minutes in, with
    import errors far from the cause. Asked from outside the checkout, so the working
    directory does not stand in for the install."""
    if _is_worker(config):
        config.stash[_TURNS] = BoxTurns(config.workerinput["testrunuid"])  # type: ignore[attr-defined]
        return
    found = subprocess.run([sys.executable, "-c", "import rtts; print(rtts.__file__)"], cwd="/",
                           capture_output=True, text=True, timeout=60)
    if found.returncode != 0 or found.stdout.strip() in ("", "None"):
        raise pytest.UsageError(
            f"rtts is not installed as a package for {sys.executable} (it imports as "
            f"{found.stdout.strip() or found.stderr.strip()[-200:]!r}): run `pip install -e . --no-deps` here"
        )


def pytest_sessionstart(session: pytest.Session) -> None:
    if not _is_worker(session.config):
        session.config.stash[_TREE_BEFORE] = _tree_state()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    turns = session.config.stash.get(_TURNS, None)
    if turns is not None:
        turns.close()
    before = session.config.stash.get(_TREE_BEFORE, None)
    after = _tree_state()
    if before is None or after is None:
        return
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    if os.environ.get(SCREENSHOTS_ENV) == "1":  # asked for: the README's screenshots refreshed
        changed = [p for p in changed if not p.startswith("docs/screenshots/")]
    session.config.stash[_TREE_CHANGES] = changed
    if changed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    changed = config.stash.get(_TREE_CHANGES, [])
    if changed:
        terminalreporter.section("the test run changed the checkout", sep="=", red=True, bold=True)
        for path in changed:
            terminalreporter.line(f"  {path}")
        terminalreporter.line("A test wrote into the tree (or these were edited during the run); tests write to "
                              f"pytest's tmp_path. {SCREENSHOTS_ENV}=1 refreshes docs/screenshots/ on purpose.")


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the browser tests save their screenshots: docs/screenshots/ (the README's
    pictures) only with RTTS_UPDATE_SCREENSHOTS=1, else a folder of pytest's own."""
    if os.environ.get(SCREENSHOTS_ENV) == "1":
        return _ROOT / "docs" / "screenshots"
    return tmp_path_factory.mktemp("screenshots")


class ServerThread:
    """An rtts server on 127.0.0.1, port 0, running its own event loop in a thread."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.loop = asyncio.new_event_loop()
        self.server: RttsServer | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="test-server", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.server = RttsServer(Service(self.config))
            self.loop.run_until_complete(self.server.start())
        except BaseException as exc:  # surface start-up failures in the test
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()

    def __enter__(self) -> ServerThread:
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        self.call(self.server.close())  # type: ignore[union-attr]
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def call(self, coro, timeout: float = 30):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def service(self) -> Service:
        assert self.server is not None
        return self.server.service

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"ws://127.0.0.1:{self.server.port}/ws"

    @property
    def http(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.port}"


class Client:
    """A real websockets client speaking protocol v1."""

    def __init__(self, url: str, **kw) -> None:  # type: ignore[no-untyped-def]
        # An unbounded receive queue: a test that stops reading must not stall the close handshake.
        kw.setdefault("max_queue", None)
        self._cm = connect(url, compression=None, open_timeout=30, **kw)
        self.ws: ClientConnection = self._cm.__enter__()

    def send(self, **msg) -> None:  # type: ignore[no-untyped-def]
        import msgpack

        self.ws.send(msgpack.packb(msg))

    def recv(self, timeout: float = 60) -> protocol.ServerMessage:
        data = self.ws.recv(timeout)
        assert isinstance(data, bytes), "server sent a text frame"
        return protocol.decode_server(data)

    def until(self, kind: type, timeout: float = 120) -> list[protocol.ServerMessage]:
        """Messages up to and including the first of ``kind``."""
        out = []
        deadline = time.monotonic() + timeout
        while True:
            msg = self.recv(max(0.1, deadline - time.monotonic()))
            out.append(msg)
            if isinstance(msg, kind):
                return out

    def utterance(self, utt_id: str, timeout: float = 120) -> list[protocol.ServerMessage]:
        out = []
        deadline = time.monotonic() + timeout
        while True:
            msg = self.recv(max(0.1, deadline - time.monotonic()))
            if getattr(msg, "id", None) == utt_id:
                out.append(msg)
                if isinstance(msg, protocol.End):
                    return out

    def close(self) -> None:
        self._cm.__exit__(None, None, None)

    def vanish(self) -> None:
        """Drop the TCP connection without a close handshake, like a client that crashed."""
        import socket

        self.ws.socket.shutdown(socket.SHUT_RDWR)
        self.ws.socket.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# The test servers speak Kokoro through the distilled generator (issue 31): the same
# predictor, cut into the same runs, with the same durations and word timing; only the
# decoder's last stage differs, at about a tenth of the teacher's compute. Kokoro's own
# generator was half of the suite's CPU time, in tests whose subject is a route, a protocol
# or a page, not the audio. A test that asks for the users' default path passes
# generator=DEFAULT_GENERATOR (make_config) or "--generator auto" (RttsProcess); the
# teacher's own audio, cost and memory are tested so by tests/live/test_engines.py,
# test_snake_live.py, test_scheduling.py, test_memory_budget.py, test_languages_e2e.py,
# tests/system/test_container.py, test_capped_soak.py, test_soak.py and test_systemd.py.
TEST_GENERATOR = "student"
DEFAULT_GENERATOR = "auto"


def make_config(tmp: Path, **overrides) -> Config:  # type: ignore[no-untyped-def]
    models = tmp / "models"
    models.mkdir(exist_ok=True)
    values = dict(host="127.0.0.1", port=0, models_dir=models, cache_dir=_CACHE, idle_unload=0.0,
                  generator=TEST_GENERATOR)
    values.update(overrides)
    return Config(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """One shared server with the built-in voices; tests must leave it idle."""
    with ServerThread(make_config(tmp_path_factory.mktemp("srv"))) as srv:
        yield srv


@pytest.fixture
def client(server: ServerThread) -> Iterator[Client]:
    with Client(server.url) as c:
        ready = c.recv()
        assert isinstance(ready, protocol.Ready)
        yield c


class RttsProcess:
    """``python -m rtts serve`` as a real child process, its log collected line by line."""

    def __init__(self, tmp: Path, *args: str, env: dict[str, str] | None = None, port: int = 0) -> None:
        import os
        import subprocess
        import sys

        models = tmp / "models"
        models.mkdir(exist_ok=True)
        generator = () if "--generator" in args else ("--generator", TEST_GENERATOR)
        cmd = [sys.executable, "-m", "rtts", "serve", "--host", "127.0.0.1", "--port", str(port),
               "--models-dir", str(models), "--cache-dir", str(_CACHE), "--idle-unload", "0", *generator, *args]
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(
            cmd, cwd=Path(__file__).resolve().parent.parent, env=full_env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.port = 0

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_listening(self, timeout: float = 90) -> RttsProcess:
        import re

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                m = re.search(r"listening on ws://127\.0\.0\.1:(\d+)/ws", line)
                if m:
                    self.port = int(m.group(1))
                    return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError("rtts did not start:\n" + self.log)

    def wait_for(self, pattern: str, timeout: float = 30) -> str:
        import re

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if re.search(pattern, line):
                    return line
            time.sleep(0.05)
        raise AssertionError(f"no log line matching {pattern!r}:\n" + self.log)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 20) -> int:
        import signal as signals

        if self.proc.poll() is None:
            self.proc.send_signal(signals.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(5)
            if self.proc.stderr is not None:
                self.proc.stderr.close()

    def __enter__(self) -> RttsProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RedisServer:
    """Debian's ``redis-server`` on a loopback port of its own, config and data in ``tmp``,
    nothing saved to disk."""

    def __init__(self, tmp: Path) -> None:
        import shutil
        import socket
        import subprocess

        exe = shutil.which("redis-server") or "/usr/bin/redis-server"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        conf = tmp / "redis.conf"
        conf.write_text(
            f"bind 127.0.0.1\nport {self.port}\ndir {tmp}\nsave \"\"\nappendonly no\n"
            f"daemonize no\nlogfile {tmp / 'redis.log'}\nprotected-mode yes\n"
        )
        self._log = tmp / "redis.log"
        self.proc = subprocess.Popen([exe, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise AssertionError("redis-server did not start: " + (self._log.read_text() if self._log.exists() else ""))
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except Exception:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
