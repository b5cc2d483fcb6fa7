#!/usr/bin/env python3
"""The articles' test: ``rtts serve`` under a memory cap, with mixed-language load.

    sudo python3 benchmarks/capped_soak.py --minutes 30 --cap-mb 512 --json /tmp/capped.json

The cap is set the way ``docker run --memory=512m`` sets it, without a container: a child
of this process's own memory cgroup gets the limit (v1 ``memory.limit_in_bytes`` or v2
``memory.max``, whichever controller the machine has), and only then is ``rtts serve``
started in it, so the inference process it starts inherits the cap. The server runs with
its own defaults, as a user would run it: only its own port, an empty models dir (the
built-in voices) and, if given here, ``--idle-unload``.

Load: ``--clients`` clients (default 6) loop over a seeded mix of what users send, with
no voice named: WebSocket ``speak`` in Mandarin, Japanese, English, Spanish (``lang:
es``) and mixed Mandarin+English, ``GET /tts`` and the OpenAI route ``POST
/v1/audio/speech``. Even-numbered clients play in real time (keeping half a second in
hand, like a player); the others and the HTTP requests read audio as fast as it comes.
One more client sends the longest allowed requests, 5,000 characters of Mandarin, then of
Japanese (hostile.py's ``max_text`` and ``longest_units`` in turn), played in real time,
one after the other. With ``--idle-unload``, every ``--quiet-every`` minutes all clients
stop until the server has unloaded its models; then one Mandarin request wakes it (its
connect -> first audio is reported) and the load resumes: unload and reload happen under
the cap too.

Every request must be answered: audio to its ``end``, or a documented error code
(rtts/protocol.py ``ErrorCode``, docs/protocol.md; over HTTP the status's ``code:`` text
or OpenAI's ``error.code``, or a body cut short, the documented sign of a failure after
the audio began). No message for ``--answer-timeout`` seconds, or a connection lost, is a
failure. When the time is up no request starts; those still running get ``--drain``
seconds, then are cancelled (and must still end).

Reported (a table on stdout, everything with ``--json FILE``): OOM kills from the
cgroup's own counter; inference process starts (``/metrics``), idle unloads and exits
named in the server's log; requests by kind and outcome; the cgroup's peak (the
kernel's) and its usage and working set (usage less inactive page cache, what ``docker
stats`` shows); the RSS of the server and of the inference process, peak (the kernel's
``VmHWM``) and final, sampled every ``--sample-s``; the memory trend (least squares after
the first minutes, MB/hour; from a short run an extrapolation) and the host probe of
latency.py at the start and the end. Exit status 0 only with no OOM kill and every
request answered.

Before the cap, ``rtts say`` speaks English, Mandarin and Japanese once outside it, so
that what the server builds once per install (the assembled Kokoro model, the optimized
ONNX files) is there: the run measures serving, not a first install (``--no-prepare``
builds them under the cap). Page cache is charged to the cgroup that first read a file:
model files another process read before are not counted against the cap, as in a
container whose image another container has read; the models' decoded weights, the
dictionaries and the activations, which is what the kernel kills for, always are.

Needs root (or a memory cgroup delegated to the user). The cgroup, the server and the
temporary directories are removed at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import psutil
import websockets

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import hostile  # noqa: E402
import latency  # noqa: E402
import soak  # noqa: E402

sys.path.insert(0, str(ROOT))
from rtts.protocol import ErrorCode  # noqa: E402
from tests.ports import free_port  # noqa: E402

DOCUMENTED = frozenset(code.value for code in ErrorCode)
# What a request may end in and still count as answered; anything else is a failure.
ANSWERED = ("audio", "cancelled", "incomplete_body")
KINDS = ("zh", "ja", "en", "es", "mixed", "tts", "openai")
WEIGHTS = (25, 20, 15, 10, 15, 8, 7)
OPENAI_VOICES = ("alloy", "nova", "onyx")  # what OpenAI clients send; rtts maps them (openai_voices.json)
PLAYER_LEAD_S = 0.5  # a real-time player keeps this much audio in hand and reads no further


# ---------------------------------------------------------------- the memory cgroup


@dataclass(frozen=True)
class CgroupFiles:
    """The files of one cgroup version's memory controller."""

    version: int
    limit: str
    usage: str
    peak: str  # the kernel's high-water mark of usage
    events: str  # holds the line "oom_kill N"
    inactive_file: str  # the memory.stat key of the page cache dropped first


V1 = CgroupFiles(1, "memory.limit_in_bytes", "memory.usage_in_bytes", "memory.max_usage_in_bytes",
                 "memory.oom_control", "total_inactive_file")
V2 = CgroupFiles(2, "memory.max", "memory.current", "memory.peak", "memory.events", "inactive_file")


def own_memory_cgroup(proc_cgroup: str, mountinfo: str) -> tuple[CgroupFiles, Path] | None:
    """This process's memory cgroup directory, from /proc/self/cgroup and
    /proc/self/mountinfo: the v1 memory hierarchy if mounted, else the v2 one if it
    offers the memory controller (checked by the caller: it needs the directory)."""
    paths = {}
    for line in proc_cgroup.splitlines():
        hier, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            paths[1] = path
        elif hier == "0" and controllers == "":
            paths[2] = path
    found = {}
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, fstype, opts = left.split(), right.split()[0], right.split()[-1]
        root, mountpoint = fields[3], fields[4]
        version = 1 if fstype == "cgroup" and "memory" in opts.split(",") else 2 if fstype == "cgroup2" else 0
        if version in paths:
            # In a container the mount's root may be the cgroup itself: the path is relative to it.
            rel = os.path.relpath(paths[version], root)
            found[version] = Path(mountpoint) / ("" if rel == "." else rel)
    # A hybrid system mounts both; its v2 hierarchy then has no memory controller.
    for version, files in ((1, V1), (2, V2)):
        if version in found:
            return files, found[version]
    return None


def stat_value(text: str, key: str) -> int:
    """A field of memory.stat, oom_control or memory.events (lines "key value")."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    raise KeyError(key)


class MemoryCgroup:
    """A child of this process's memory cgroup with a limit, made before anything runs in it."""

    def __init__(self, files: CgroupFiles, path: Path) -> None:
        self.files = files
        self.path = path

    @classmethod
    def create(cls, cap_bytes: int, name: str) -> MemoryCgroup:
        proc = Path("/proc/self")
        found = own_memory_cgroup((proc / "cgroup").read_text(), (proc / "mountinfo").read_text())
        if found is None:
            raise RuntimeError("no memory cgroup: neither a v1 memory hierarchy nor cgroup2 is mounted")
        files, parent = found
        if files.version == 2:
            enable_memory_for_children(parent)
        path = parent / name
        path.mkdir()
        cgroup = cls(files, path)
        try:
            (path / files.limit).write_text(str(cap_bytes))
            if cgroup.limit() != cap_bytes:  # v1 rounds to pages; a cap that did not take is no test
                raise RuntimeError(f"{path / files.limit} reads {cgroup.limit()}, not {cap_bytes}")
        except BaseException:
            path.rmdir()
            raise
        return cgroup

    def __enter__(self) -> MemoryCgroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def read(self, name: str) -> str:
        return (self.path / name).read_text()

    def limit(self) -> int:
        return int(self.read(self.files.limit).strip())

    def usage(self) -> int:
        return int(self.read(self.files.usage))

    def working_set(self) -> int:
        """Usage less the inactive page cache, which the kernel drops before it kills."""
        return self.usage() - stat_value(self.read("memory.stat"), self.files.inactive_file)

    def peak(self) -> int | None:
        try:
            return int(self.read(self.files.peak))
        except FileNotFoundError:  # v2 before Linux 5.19
            return None

    def oom_kills(self) -> int | None:
        try:
            return stat_value(self.read(self.files.events), "oom_kill")
        except KeyError:  # v1 before Linux 4.13 does not count them
            return None

    def pids(self) -> list[int]:
        return [int(p) for p in self.read("cgroup.procs").split()]

    def remove(self, timeout: float = 30.0) -> None:
        """Kill what is left in it (only what this benchmark started runs there), then rmdir."""
        deadline = time.monotonic() + timeout
        while self.path.exists():
            pids = self.pids()
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if not pids:
                try:
                    self.path.rmdir()
                    return
                except OSError:
                    if time.monotonic() > deadline:
                        raise
            time.sleep(0.1)


def enable_memory_for_children(parent: Path) -> None:
    """On cgroup v2 a child has memory.max only if its parent hands the controller down."""
    if "memory" not in (parent / "cgroup.controllers").read_text().split():
        raise RuntimeError(f"the memory controller is not available in {parent}")
    if "memory" not in (parent / "cgroup.subtree_control").read_text().split():
        try:
            (parent / "cgroup.subtree_control").write_text("+memory")
        except OSError as exc:  # EBUSY: the parent holds processes (v2's "no internal processes")
            raise RuntimeError(f"cannot enable the memory controller below {parent} ({exc}): on cgroup v2 a "
                               "cgroup holding processes hands no controller down; run this from one that "
                               "already does (memory in its cgroup.subtree_control)") from exc


def unavailable_reason() -> str | None:
    """Why a capped run cannot happen here, or None: a probe cgroup is made and removed."""
    try:
        with MemoryCgroup.create(64 * 2**20, f"rtts-capped-probe-{os.getpid()}"):
            return None
    except (OSError, RuntimeError) as exc:
        who = "" if os.geteuid() == 0 else " (not root)"
        return f"no writable memory cgroup{who}: {exc}"


# ---------------------------------------------------------------- the server in the cgroup


class CappedServer(latency.ServerProcess):
    """``rtts serve`` with its defaults, started inside the cgroup.

    latency.py's server sets benchmark flags (no phrase cache, its idle unload) and
    samples RSS every 20 ms; this one runs as a user would and is sampled every few
    seconds by the soak. The rest (HTTP, /readyz, stop) is latency.py's."""

    def __init__(self, cgroup: MemoryCgroup, workdir: Path, idle_unload: float | None,
                 cache_dir: Path | None) -> None:
        self.port = free_port()
        models = workdir / "models"
        models.mkdir()
        cmd = [sys.executable, "-m", "rtts", "serve", "--port", str(self.port), "--models-dir", str(models)]
        if idle_unload is not None:
            cmd += ["--idle-unload", str(idle_unload)]
        if cache_dir is not None:
            cmd += ["--cache-dir", str(cache_dir)]
        self.command = " ".join(["python3", *cmd[1:]])
        self.log_path = workdir / "server.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(latency.in_cgroup(cgroup.path, cmd), cwd=ROOT, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        self.ps = psutil.Process(self.proc.pid)
        self.peak = 0
        self._stop = threading.Event()
        deadline = time.monotonic() + 120
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not start:\n{self.log()[-3000:]}")
            time.sleep(0.1)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def readyz(self) -> dict[str, Any]:
        return json.loads(self.http("/readyz"))

    def starts(self) -> int | None:
        """Inference processes started, from /metrics (after idle unloads, or after a crash)."""
        text = self.http("/metrics").decode()
        m = re.search(r"^rtts_inference_process_starts(?:_total)? (\S+)$", text, re.M)
        return int(float(m.group(1))) if m else None


def vm_hwm(pid: int) -> int | None:
    """A process's peak RSS as the kernel counted it (/proc/PID/status VmHWM), in bytes."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    m = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    return int(m.group(1)) * 1024 if m else None


@dataclass
class Memory:
    """What the sampler has seen: peaks per process and every inference process."""

    server_hwm: int = 0
    inference_hwm: int = 0
    inference_pids: set[int] = field(default_factory=set)
    samples: list[dict[str, Any]] = field(default_factory=list)
    server_report: dict[str, Any] | None = None  # /readyz "memory", where the server has a budget


def sample(server: CappedServer, cgroup: MemoryCgroup, t0: float, memory: Memory) -> dict[str, Any]:
    """One reading of the cgroup and of both processes (the server must be alive)."""
    server_rss = server.ps.memory_info().rss
    inference_rss = other_rss = 0
    for child in server.ps.children(recursive=True):
        try:
            rss = child.memory_info().rss
            if "rtts.host.child" in child.cmdline():
                inference_rss += rss
                memory.inference_pids.add(child.pid)
                memory.inference_hwm = max(memory.inference_hwm, vm_hwm(child.pid) or 0)
            else:
                other_rss += rss
        except psutil.Error:
            pass  # ended between the listing and the reading (an OOM kill, an idle unload)
    memory.server_hwm = max(memory.server_hwm, vm_hwm(server.ps.pid) or 0)
    try:
        starts = server.starts()
        memory.server_report = server.readyz().get("memory", memory.server_report)
    except OSError:
        starts = None
    s = {
        "t": round(time.monotonic() - t0, 1),
        "cgroup_mb": round(cgroup.usage() / 2**20, 1),
        "working_set_mb": round(cgroup.working_set() / 2**20, 1),
        "server_rss_mb": round(server_rss / 2**20, 1),
        "inference_rss_mb": round(inference_rss / 2**20, 1),
        "rss_mb": round((server_rss + inference_rss + other_rss) / 2**20, 1),
        "oom_kills": cgroup.oom_kills(),
        "inference_starts": starts,
    }
    memory.samples.append(s)
    return s


def trend(samples: list[dict[str, Any]], key: str, after_s: float) -> float:
    """MB/hour of ``key`` after the first ``after_s`` seconds (soak.py's least squares)."""
    steady = [{"t": s["t"], "rss_mb": s[key]} for s in samples if s["t"] >= after_s]
    return round(soak.slope_mb_per_hour(steady), 1)


# ---------------------------------------------------------------- the requests


def sentences(path: Path, key: str) -> list[str]:
    return [s if isinstance(s, str) else s["text"] if isinstance(s, dict) else s[0]
            for s in json.loads(path.read_text())[key]]


@dataclass(frozen=True)
class Texts:
    by_lang: dict[str, list[str]]
    long: tuple[tuple[str, str], ...]  # (label, text): the longest allowed requests

    @classmethod
    def load(cls) -> Texts:
        here = ROOT / "benchmarks"
        by_lang = {lang: sentences(here / "sentences" / f"{lang}.json", lang)
                   for lang in ("zh", "ja", "en", "es")}
        by_lang["mixed"] = sentences(here / "mixed_zh_en.json", "mixed")
        long = tuple((f"{how.__name__}:{lang}", how(lang))
                     for how in (hostile.max_text, hostile.longest_units) for lang in ("zh", "ja"))
        return cls(by_lang, long)

    def pick(self, rng: random.Random, lang: str, most: int = 3) -> str:
        sep = " " if lang in ("en", "es") else ""
        return sep.join(rng.sample(self.by_lang[lang], rng.randint(1, most)))


@dataclass
class Tally:
    outcomes: Counter = field(default_factory=Counter)  # (kind, outcome)
    failures: list[str] = field(default_factory=list)
    ttfa_ms: dict[str, list[float]] = field(default_factory=dict)
    underruns: int = 0
    wakes: list[dict[str, Any]] = field(default_factory=list)

    def count(self, kind: str, outcome: str, detail: str = "") -> None:
        self.outcomes[(kind, outcome)] += 1
        if not answered(outcome):
            self.failures.append(f"{time.strftime('%H:%M:%S')} {kind}: {outcome} {detail}".rstrip())


def answered(outcome: str) -> bool:
    return outcome in ANSWERED or outcome.startswith("error:") and outcome[6:] in DOCUMENTED


@dataclass
class Run:
    """What every client shares: when to stop, when to cancel, and the gate of quiet phases."""

    until: float
    answer_timeout: float
    cut: asyncio.Event = field(default_factory=asyncio.Event)  # set after the drain: cancel what runs
    gate: asyncio.Event = field(default_factory=asyncio.Event)  # cleared while the clients stay quiet

    def __post_init__(self) -> None:
        self.gate.set()


async def read_answer(ws: Any, uid: str, run: Run, tally: Tally, kind: str, paced: bool,
                      opened: float | None = None) -> tuple[str, latency.Stream]:
    """Read one utterance to its answer: ``end``, or an ``error`` refusing it before its
    ``start`` (docs/protocol.md: a refused ``speak`` gets no ``end``)."""
    stream = latency.Stream(sent=opened if opened is not None else time.perf_counter())
    rate, code, started, cancelled = 24000, None, False, False
    while True:
        if run.cut.is_set() and not cancelled:
            await ws.send(soak.pack(type="cancel", id=uid))
            cancelled = True
        msg = msgpack.unpackb(await asyncio.wait_for(ws.recv(), run.answer_timeout))
        if msg.get("id") != uid:
            if msg["type"] == "error":  # names no utterance: these clients give the server no cause for one
                tally.failures.append(f"{kind}: error without id {msg}")
            continue
        if msg["type"] == "start":
            started, rate = True, msg["sample_rate"]
        elif msg["type"] == "audio":
            stream.frame(time.perf_counter(), len(msg["data"]) / 2 / rate)
            assert stream.first is not None
            ahead = stream.first + stream.audio_s + stream.gap_s - time.perf_counter()
            # A listener who cancelled plays no more: what the server sent before the cancel
            # is read at once. Played out in real time, a long text's audio in the socket's
            # buffers kept the long client past the drain and its wait.
            if paced and not cancelled and ahead > PLAYER_LEAD_S:
                await asyncio.sleep(ahead - PLAYER_LEAD_S)
        elif msg["type"] == "error":
            code = code or msg["code"]
            if not started:
                return f"error:{code}", stream
        elif msg["type"] == "end":
            if paced:
                tally.underruns += stream.underruns
            if msg["reason"] == "done":
                if msg["stats"].get("ttfa_ms", -1) >= 0:
                    tally.ttfa_ms.setdefault(kind, []).append(msg["stats"]["ttfa_ms"])
                return ("audio" if stream.audio_s > 0 else "no_audio"), stream
            if msg["reason"] == "cancelled":
                return "cancelled", stream
            return (f"error:{code}" if code else "undocumented:end_error_without_code"), stream


async def ws_request(url: str, run: Run, tally: Tally, kind: str, text: str, lang: str | None,
                     paced: bool) -> latency.Stream | None:
    """One ``speak`` on its own connection, with no voice named; its outcome counted."""
    opened = time.perf_counter()
    # A player reads no further than it plays, so the pong to a ping of its own waits behind
    # the audio still unplayed: websockets' keepalive (20 s) closed a real-time listener of a
    # long text after a minute, uncapped, while the server was serving it. A player sends none.
    keepalive = {"ping_interval": None} if paced else {}
    try:
        ws = await soak.connect(url, max_size=None, **keepalive)
    except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
        tally.count(kind, "connection_lost", f"connect: {type(exc).__name__} {exc}")
        return None
    try:
        request = {"type": "speak", "id": "u", "text": text}
        if lang:
            request["lang"] = lang
        await ws.send(msgpack.packb(request))
        outcome, stream = await read_answer(ws, "u", run, tally, kind, paced, opened)
        tally.count(kind, outcome)
        await ws.close()
        return stream
    except TimeoutError:
        tally.count(kind, "no_answer", f"nothing for {run.answer_timeout:.0f} s")
    except websockets.ConnectionClosed as exc:
        tally.count(kind, "connection_lost", str(exc))
    ws.transport.abort()
    return None


def http_request(port: int, method: str, path: str, body: bytes | None, timeout: float) -> tuple[str, str]:
    """One speech request over plain HTTP, its body read as it comes: (outcome, detail)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        resp = conn.getresponse()
        if resp.status != 200:
            data = resp.read().decode(errors="replace")
            try:  # OpenAI's shape, else rtts's "code: message" text
                code = json.loads(data)["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = data.split(":", 1)[0].strip()
            return (f"error:{code}" if code in DOCUMENTED else f"undocumented:http_{resp.status}"), data[:200]
        got = 0
        while chunk := resp.read(8192):
            got += len(chunk)
        header = 44 if resp.getheader("Content-Type", "").startswith("audio/wav") else 0
        return ("audio" if got > header else "no_audio"), ""
    except http.client.IncompleteRead as exc:
        return "incomplete_body", repr(exc)[:200]
    except TimeoutError:
        return "no_answer", f"nothing for {timeout:.0f} s"
    except (OSError, http.client.HTTPException) as exc:
        return "connection_lost", f"{type(exc).__name__} {exc}"
    finally:
        conn.close()


async def one_request(server: CappedServer, run: Run, tally: Tally, pool: concurrent.futures.Executor,
                      kind: str, rng: random.Random, texts: Texts, paced: bool) -> None:
    if kind in ("zh", "ja", "en", "es", "mixed"):
        lang = "es" if kind == "es" else None  # Spanish has no script of its own: a user names it
        text = texts.pick(rng, kind, 2 if kind == "mixed" else 3)
        await ws_request(server.url, run, tally, kind, text, lang, paced)
        return
    if kind == "tts":
        text = texts.pick(rng, rng.choice(("zh", "ja", "en")), 2)
        args = ("GET", "/tts?" + urllib.parse.urlencode({"text": text}), None)
    else:
        body = {"model": "tts-1", "input": texts.pick(rng, "en", 2), "voice": rng.choice(OPENAI_VOICES)}
        args = ("POST", "/v1/audio/speech", json.dumps(body).encode())
    loop = asyncio.get_running_loop()
    outcome, detail = await loop.run_in_executor(pool, http_request, server.port, *args, run.answer_timeout)
    tally.count(kind, outcome, detail)


async def client(server: CappedServer, run: Run, tally: Tally, pool: concurrent.futures.Executor, idx: int,
                 clients: int, texts: Texts, seed: int, think_s: tuple[float, float]) -> None:
    rng = random.Random(seed * 1000 + idx)
    paced = idx % 2 == 0
    # The clients share out every kind first, so even a short run tries each; then a weighted mix.
    first = list(KINDS[idx::clients])
    while time.monotonic() < run.until:
        await run.gate.wait()
        if time.monotonic() >= run.until:
            break
        kind = first.pop(0) if first else rng.choices(KINDS, WEIGHTS)[0]
        await one_request(server, run, tally, pool, kind, rng, texts, paced)
        await asyncio.sleep(rng.uniform(*think_s))


async def long_client(server: CappedServer, run: Run, tally: Tally, texts: Texts, pause_s: float) -> None:
    """The longest allowed Mandarin and Japanese requests, one after the other, listened to."""
    i = 0
    while time.monotonic() < run.until:
        await run.gate.wait()
        if time.monotonic() >= run.until:
            break
        label, text = texts.long[i % len(texts.long)]
        await ws_request(server.url, run, tally, f"long {label}", text, None, paced=True)
        i += 1
        await asyncio.sleep(pause_s)


async def quiet_phases(server: CappedServer, run: Run, tally: Tally, texts: Texts, every_s: float,
                       idle_unload: float) -> None:
    """Every ``every_s``: the clients stop, the server unloads, one Mandarin request wakes it."""
    loop = asyncio.get_running_loop()

    async def readyz() -> dict[str, Any]:
        return await loop.run_in_executor(None, server.readyz)

    while time.monotonic() + every_s < run.until:
        await asyncio.sleep(every_s)
        run.gate.clear()
        began = time.monotonic()
        try:
            while (await readyz())["connections"] and time.monotonic() < run.until:
                await asyncio.sleep(1.0)
            deadline = time.monotonic() + idle_unload + 60
            while (await readyz())["loaded"] and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
            unloaded = not (await readyz())["loaded"]
            # A first sentence never heard before: the phrase cache (kept over the unload) cannot answer it.
            now = time.localtime()
            clock = f"现在是{now.tm_hour}点{now.tm_min}分{now.tm_sec}秒。"
            text = clock + texts.pick(random.Random(now.tm_sec), "zh", 1)
            stream = await ws_request(server.url, run, tally, "wake zh", text, None, paced=False)
            first_ms = round(stream.ttfa * 1000) if stream is not None and stream.first is not None else None
            tally.wakes.append({"unloaded": unloaded, "quiet_s": round(time.monotonic() - began, 1),
                                "connect_to_first_audio_ms": first_ms})
        finally:
            run.gate.set()


async def drive(server: CappedServer, cgroup: MemoryCgroup, opts: Options, memory: Memory,
                tally: Tally) -> None:
    t0 = time.monotonic()
    run = Run(until=t0 + opts.minutes * 60, answer_timeout=opts.answer_timeout)
    texts = Texts.load()
    loop = asyncio.get_running_loop()
    sampler = concurrent.futures.ThreadPoolExecutor(1)  # its own thread: never behind the clients
    pool = concurrent.futures.ThreadPoolExecutor(opts.clients + 1, thread_name_prefix="http")

    async def sample_every() -> None:
        last_print = 0.0
        while True:
            try:
                s = await loop.run_in_executor(sampler, sample, server, cgroup, t0, memory)
            except psutil.NoSuchProcess:
                tally.failures.append(f"the server is gone at {time.monotonic() - t0:.0f} s")
                return
            if s["t"] - last_print >= 60:
                last_print = s["t"]
                done = sum(n for (_, o), n in tally.outcomes.items() if answered(o))
                print(f"  {s['t'] / 60:5.1f} min: cgroup {s['cgroup_mb']:.0f} MB (working set "
                      f"{s['working_set_mb']:.0f}), RSS server {s['server_rss_mb']:.0f} + inference "
                      f"{s['inference_rss_mb']:.0f} MB, OOM kills {s['oom_kills']}, answered {done}, "
                      f"failed {len(tally.failures)}", file=sys.stderr, flush=True)
            await asyncio.sleep(opts.sample_s)

    sampling = asyncio.create_task(sample_every())
    tasks = [asyncio.create_task(client(server, run, tally, pool, i, opts.clients, texts, opts.seed,
                                        opts.think_s)) for i in range(opts.clients)]
    tasks.append(asyncio.create_task(long_client(server, run, tally, texts, opts.long_pause_s)))
    if opts.idle_unload is not None and opts.quiet_every_minutes > 0:
        quiet = quiet_phases(server, run, tally, texts, opts.quiet_every_minutes * 60, opts.idle_unload)
        tasks.append(asyncio.create_task(quiet))
    try:
        await asyncio.sleep(max(0.0, run.until - time.monotonic()))
        _, pending = await asyncio.wait(tasks, timeout=opts.drain_s)
        run.cut.set()  # what still runs is cancelled, and must still end
        if pending:
            await asyncio.wait(pending, timeout=opts.answer_timeout + 30)
        for task in tasks:
            if not task.done():
                task.cancel()
                tally.failures.append("a client did not finish after the drain and its cancel")
            elif task.exception() is not None:
                tally.failures.append(f"a client crashed: {task.exception()!r}")
        await asyncio.sleep(2.0)  # let the server see the last connections go
        if server.proc.poll() is None:
            await loop.run_in_executor(sampler, sample, server, cgroup, t0, memory)
    finally:
        sampling.cancel()
        for task in tasks:
            task.cancel()
        pool.shutdown(wait=False, cancel_futures=True)
        sampler.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------- a run, and its report


@dataclass(frozen=True)
class Options:
    minutes: float = 30.0
    cap_mb: int = 512
    clients: int = 6
    idle_unload: float | None = None  # None: the server's own default
    quiet_every_minutes: float = 5.0
    cache_dir: Path | None = None  # None: the server's own default
    seed: int = 1
    think_s: tuple[float, float] = (0.5, 3.0)
    long_pause_s: float = 20.0
    sample_s: float = 5.0
    answer_timeout: float = 120.0
    drain_s: float = 120.0
    prepare: bool = True  # build the per-install caches outside the cap first
    trend_after_minutes: float | None = None  # None: 5 minutes, or a third of a shorter run


def prepare(cache_dir: Path | None, workdir: Path) -> None:
    """Build what the server builds once per install (the assembled Kokoro model, the
    optimized ONNX files) outside the cap, by speaking every engine's languages once with
    ``rtts say``: the capped run measures serving, not a first install."""
    models = workdir / "prepare-models"
    models.mkdir()
    cmd = [sys.executable, "-m", "rtts", "say", "Hello there. 你好，欢迎。こんにちは。",
           "-o", str(workdir / "prepare.wav"), "--models-dir", str(models), "--log-level", "warning"]
    if cache_dir is not None:
        cmd += ["--cache-dir", str(cache_dir)]
    done = subprocess.run(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"rtts say could not prepare the caches:\n{done.stderr[-3000:]}")


def run_capped(opts: Options) -> dict[str, Any]:
    """Cgroup, server, load and the figures; everything is removed before it returns."""
    memory, tally = Memory(), Tally()
    with tempfile.TemporaryDirectory(prefix="rtts-capped-") as tmp:
        if opts.prepare:
            prepare(opts.cache_dir, Path(tmp))
        cpu_start = latency.cpu_times()
        probes = [latency.probe_ms()]
        result = capped(opts, Path(tmp), memory, tally)
    probes.append(latency.probe_ms())
    result["probes_ms"] = [round(p) for p in probes]
    result["steal"] = round(latency.steal_share(cpu_start, latency.cpu_times()), 3)
    return result


def capped(opts: Options, workdir: Path, memory: Memory, tally: Tally) -> dict[str, Any]:
    """The run itself: the cgroup, the server in it, the load; then the figures."""
    with MemoryCgroup.create(opts.cap_mb * 2**20, f"rtts-capped-soak-{os.getpid()}") as cgroup:
        server = CappedServer(cgroup, workdir, opts.idle_unload, opts.cache_dir)
        try:
            asyncio.run(drive(server, cgroup, opts, memory, tally))
            alive = server.proc.poll() is None
        finally:
            server.stop()
        # The kernel's own counters, read once nothing runs in the cgroup any more.
        kernel = {"peak": cgroup.peak(), "oom_kills": cgroup.oom_kills(),
                  "at_cap": stat_value(cgroup.read("memory.events"), "max") if cgroup.files.version == 2
                  else int(cgroup.read("memory.failcnt"))}
    return figures(opts, cgroup, server, alive, kernel, memory, tally)


def figures(opts: Options, cgroup: MemoryCgroup, server: CappedServer, alive: bool, kernel: dict[str, Any],
            memory: Memory, tally: Tally) -> dict[str, Any]:
    log = server.log()
    peak, oom_kills = kernel["peak"], kernel["oom_kills"]
    samples = memory.samples
    after_s = 60 * (opts.trend_after_minutes if opts.trend_after_minutes is not None
                    else min(5.0, opts.minutes / 3))
    outcomes: dict[str, dict[str, int]] = {}
    for (kind, outcome), n in sorted(tally.outcomes.items()):
        outcomes.setdefault(kind, {})[outcome] = n
    failed = sum(n for (_, o), n in tally.outcomes.items() if not answered(o))
    exits = Counter(re.findall(r"the inference process [^\n]*?exit code (-?\d+|None)", log))
    starts = next((s["inference_starts"] for s in reversed(samples) if s["inference_starts"] is not None),
                  None)
    final = samples[-1] if samples else {}
    result = {
        "command_server": server.command,
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()},
        "cgroup": {"version": cgroup.files.version, "path": str(cgroup.path), "cap_mb": opts.cap_mb},
        "oom_kills": oom_kills,
        "times_at_cap": kernel["at_cap"],  # v1 memory.failcnt, v2 memory.events max: reclaim was needed
        "inference_starts": starts,
        "inference_pids_seen": len(memory.inference_pids),
        "idle_unloads": len(re.findall(r"idle: unloaded", log)),
        "inference_exit_lines": dict(exits),  # log lines naming a dead inference process, by exit code
        "outcomes": outcomes,
        "requests": sum(tally.outcomes.values()),
        "failed": failed,
        "failures": tally.failures[:50],
        "underruns_real_time_players": tally.underruns,
        "ttfa_ms_p50": {k: round(latency.pct(v, 50)) for k, v in sorted(tally.ttfa_ms.items()) if v},
        "wakes": tally.wakes,
        "memory_mb": {
            "cgroup_peak": round(peak / 2**20, 1) if peak is not None
            else max((s["cgroup_mb"] for s in samples), default=None),
            "cgroup_peak_from": "kernel" if peak is not None else "samples",
            "cgroup_final": final.get("cgroup_mb"),
            "working_set_peak_sampled": max((s["working_set_mb"] for s in samples), default=None),
            "working_set_final": final.get("working_set_mb"),
            "server_rss_peak": round(memory.server_hwm / 2**20, 1),
            "server_rss_final": final.get("server_rss_mb"),
            "inference_rss_peak": round(memory.inference_hwm / 2**20, 1),
            "inference_rss_final": final.get("inference_rss_mb"),
            "rss_total_peak_sampled": max((s["rss_mb"] for s in samples), default=None),
            "rss_total_final": final.get("rss_mb"),
        },
        "trend_mb_per_hour": {key: trend(samples, key, after_s)
                              for key in ("cgroup_mb", "working_set_mb", "rss_mb")},
        "trend_after_s": after_s,
        "server_alive_at_end": alive,
        "server_memory_report": memory.server_report,
        "server_log_problems": [line for line in log.splitlines()
                                if re.search(r" (ERROR|CRITICAL) |Traceback", line)][:30],
        "load_average_end": os.getloadavg(),
        "samples": samples,
    }
    result["ok"] = oom_kills == 0 and failed == 0 and not tally.failures and alive
    return result


def table(r: dict[str, Any]) -> str:
    m = r["memory_mb"]
    t = r["trend_mb_per_hour"]
    o = r["options"]
    rows = [
        ("cap", f"{r['cgroup']['cap_mb']} MB (cgroup v{r['cgroup']['version']}), {o['minutes']:g} min, "
                f"{o['clients']} clients + 1 long-text client"),
        ("OOM kills (cgroup counter)", r["oom_kills"]),
        ("times at the cap (kernel reclaimed)", r["times_at_cap"]),
        ("inference process starts (/metrics)",
         f"{r['inference_starts']} ({r['inference_pids_seen']} pids seen, {r['idle_unloads']} idle unloads)"),
        ("inference process exits in the log",
         ", ".join(f"code {c}: {n}" for c, n in r["inference_exit_lines"].items()) or "none"),
        ("requests", f"{r['requests']}, failed {r['failed']}"),
        ("cgroup peak / final", f"{m['cgroup_peak']} MB ({m['cgroup_peak_from']}) / {m['cgroup_final']} MB"),
        ("working set peak (sampled) / final",
         f"{m['working_set_peak_sampled']} / {m['working_set_final']} MB"),
        ("server RSS peak / final", f"{m['server_rss_peak']} / {m['server_rss_final']} MB"),
        ("inference RSS peak / final", f"{m['inference_rss_peak']} / {m['inference_rss_final']} MB"),
        ("server + inference RSS peak (sampled) / final",
         f"{m['rss_total_peak_sampled']} / {m['rss_total_final']} MB"),
        (f"trend after {r['trend_after_s'] / 60:.1f} min (MB/hour)",
         f"cgroup {t['cgroup_mb']}, working set {t['working_set_mb']}, RSS {t['rss_mb']}"),
        ("underruns (real-time players)", r["underruns_real_time_players"]),
        ("TTFA p50 by kind (ms)", ", ".join(f"{k} {v}" for k, v in r["ttfa_ms_p50"].items())),
        ("host probe start / end",
         f"{r['probes_ms'][0]} / {r['probes_ms'][1]} ms, CPU stolen {r['steal']:.0%}"),
        ("server alive at the end", r["server_alive_at_end"]),
    ]
    if r["server_memory_report"] is not None:  # the server's own account of its budget, last seen
        rows.append(("server's memory report (/readyz)", json.dumps(r["server_memory_report"])))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    for w in r["wakes"]:
        lines.append(f"{'wake after quiet':<{width}}  unloaded {w['unloaded']}, connect -> first audio "
                     f"{w['connect_to_first_audio_ms']} ms")
    lines += ["", "| kind | " + " | ".join(("outcome", "count")) + " |", "|---|---|---|"]
    for kind, by in r["outcomes"].items():
        for outcome, n in by.items():
            mark = "" if answered(outcome) else " (failure)"
            lines.append(f"| {kind} | {outcome}{mark} | {n} |")
    if r["failures"]:
        lines += ["", "failures (first 50):", *("  " + f for f in r["failures"])]
    lines.append("")
    lines.append("OK" if r["ok"] else "NOT OK: an OOM kill, a request unanswered, or the server gone")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0, help="how long the load runs (default 30)")
    ap.add_argument("--cap-mb", type=int, default=512, help="the cgroup's memory limit (default 512)")
    ap.add_argument("--clients", type=int, default=6,
                    help="concurrent clients besides the long-text one (default 6)")
    ap.add_argument("--idle-unload", type=float,
                    help="the server's --idle-unload (default: the server's own); turns the quiet phases on")
    ap.add_argument("--quiet-every", type=float, default=5.0, metavar="MINUTES",
                    help="with --idle-unload: minutes between quiet phases (default 5; 0: none)")
    ap.add_argument("--cache-dir", type=Path, help="the server's --cache-dir (default: the server's own)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--think", type=float, nargs=2, default=(0.5, 3.0), metavar=("MIN", "MAX"),
                    help="seconds a client waits between requests (uniform; default 0.5 3)")
    ap.add_argument("--answer-timeout", type=float, default=120.0,
                    help="seconds without a message before a request counts as unanswered (default 120)")
    ap.add_argument("--drain", type=float, default=120.0,
                    help="seconds the requests running at the end get before their cancel (default 120)")
    ap.add_argument("--sample-s", type=float, default=5.0, help="seconds between memory samples (default 5)")
    ap.add_argument("--no-prepare", dest="prepare", action="store_false",
                    help="do not build the per-install caches outside the cap first (a first start under it)")
    ap.add_argument("--json", type=Path, help="write every figure and sample here")
    args = ap.parse_args()
    reason = unavailable_reason()
    if reason:
        ap.error(reason)
    opts = Options(minutes=args.minutes, cap_mb=args.cap_mb, clients=args.clients,
                   idle_unload=args.idle_unload, quiet_every_minutes=args.quiet_every,
                   cache_dir=args.cache_dir, seed=args.seed, think_s=tuple(args.think),
                   answer_timeout=args.answer_timeout, drain_s=args.drain, sample_s=args.sample_s,
                   prepare=args.prepare)
    # SIGTERM ends the run like Ctrl-C: the cgroup and the server are still removed.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        result = run_capped(opts)
    except KeyboardInterrupt:
        print("interrupted: the server, the cgroup and the temporary files are removed", file=sys.stderr)
        return 130
    result["command"] = "python3 benchmarks/capped_soak.py" + "".join(f" {a}" for a in sys.argv[1:])
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    print(table(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
