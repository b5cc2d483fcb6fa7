"""Hypothesis against a LIVE server: random bytes, random msgpack and message-shaped maps
go down a real WebSocket (and raw bytes down a bare TCP socket). Every answer must be a
documented message with a documented error code, the server must log no error, and a
well-behaved client on the same server must carry on."""

from __future__ import annotations

import logging
import socket
import time

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed

from rtts import protocol

from tests.conftest import Client, ServerThread, make_config
from tests.rawws import frame, open_raw, read_frame

pytestmark = [
    pytest.mark.slow,
    # The live server's threads use the random module (websockets' keepalive ping payloads)
    # while Hypothesis draws; it takes that for a strategy using random, which ours do not.
    pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning"),
]

PIPER = "piper/en_US-joe-medium"
CODES = {c.value for c in protocol.ErrorCode}
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)


class Problems(logging.Handler):
    """Every warning or worse from rtts and websockets, and every traceback."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory):
    problems = Problems()
    for name in ("rtts", "websockets", "asyncio"):
        logging.getLogger(name).addHandler(problems)
    # The fuzzer sends as fast as the server answers (thousands of messages a second):
    # what it tests is each message's answer, not the rate limit (test_floods.py does).
    cfg = make_config(tmp_path_factory.mktemp("fuzz"), max_text_chars=200, max_utterances=4,
                      message_rate=1e6, message_burst=100_000)
    try:
        with ServerThread(cfg) as srv:
            srv.problems = problems  # type: ignore[attr-defined]
            srv.good = GoodClient(srv)  # type: ignore[attr-defined]
            yield srv
            srv.good.stop()  # type: ignore[attr-defined]
    finally:
        for name in ("rtts", "websockets", "asyncio"):
            logging.getLogger(name).removeHandler(problems)


class GoodClient:
    """A well-behaved client speaking short utterances, over and over, all through the fuzzing."""

    def __init__(self, srv: ServerThread) -> None:
        import threading

        self.srv = srv
        self.done = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with Client(self.srv.url) as c:
                assert isinstance(c.recv(), protocol.Ready)
                n = 0
                while not self._stop.is_set():
                    n += 1
                    c.send(type="speak", id=f"g{n}", text="Still here.", voice=PIPER)
                    msgs = c.utterance(f"g{n}", timeout=60)
                    if msgs[-1].reason != "done" or any(isinstance(m, protocol.Error) for m in msgs):
                        self.failures.append(repr(msgs[-1]))
                    else:
                        self.done += 1
                    self._stop.wait(0.2)
        except Exception as exc:  # any failure of the good client is a test failure
            self.failures.append(repr(exc))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


class Fuzzer:
    """One connection, reopened if the server closed it (which it may only do with 1009)."""

    def __init__(self, srv: ServerThread) -> None:
        self.srv = srv
        self.client: Client | None = None

    def conn(self) -> Client:
        if self.client is None:
            self.client = Client(self.srv.url)
            assert isinstance(self.client.recv(), protocol.Ready)
        return self.client

    def exchange(self, data: bytes | str) -> list[protocol.ServerMessage]:
        """Send one frame, then cancel everything and ping; return all that came back."""
        c = self.conn()
        try:
            c.ws.send(data)
            c.send(type="cancel")
            c.send(type="ping", t="sync")
            out = []
            while True:
                msg = c.recv(timeout=60)
                out.append(msg)
                if isinstance(msg, protocol.Pong) and msg.t == "sync":
                    return out
        except ConnectionClosed as closed:
            assert closed.rcvd is not None and closed.rcvd.code == 1009, closed
            self.client = None
            return []


def check(msgs: list[protocol.ServerMessage]) -> None:
    for m in msgs:
        assert type(m) in protocol.SERVER_TYPES.values()
        if isinstance(m, protocol.Error):
            assert m.code in CODES and m.code != "internal", m
        if isinstance(m, protocol.End):
            assert m.reason in ("done", "cancelled", "error")


def well_behaved(srv: ServerThread) -> None:
    with Client(srv.url) as good:
        assert isinstance(good.recv(), protocol.Ready)
        good.send(type="speak", id="g", text="Still here.", voice=PIPER)
        msgs = good.utterance("g")
        assert msgs[-1].reason == "done" and not [m for m in msgs if isinstance(m, protocol.Error)]


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=True),
    st.text(max_size=40), st.binary(max_size=40),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.dictionaries(st.one_of(st.text(max_size=10), st.integers(-(2**63), 2**63), st.binary(max_size=4)), inner, max_size=6),
    ),
    max_leaves=20,
)
FIELDS = ["id", "text", "voice", "lang", "speed", "v", "t", "interrupt", "format", "frame_ms", "sample_rate", "token"]
shaped = st.fixed_dictionaries(
    {"type": st.sampled_from([*protocol.CLIENT_TYPES, "dance", ""])},
    optional={
        "id": st.one_of(st.text(max_size=130), values),
        "text": st.one_of(st.sampled_from(["Hi.", "", " ", "Hello there, friend.", "x" * 201]), values),
        "voice": st.one_of(st.sampled_from([PIPER, "kokoro/jf_alpha", "nope"]), values),
        **{f: values for f in FIELDS[3:]},
    },
)


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes_in_binary_frames(live: ServerThread, data: bytes):
    fuzz = _fuzzer(live)
    check(fuzz.exchange(data))


@FUZZ
@given(obj=values)
def test_random_msgpack(live: ServerThread, obj):  # type: ignore[no-untyped-def]
    check(_fuzzer(live).exchange(msgpack.packb(obj, use_bin_type=True)))


@FUZZ
@given(obj=shaped)
def test_message_shaped_maps(live: ServerThread, obj):  # type: ignore[no-untyped-def]
    check(_fuzzer(live).exchange(msgpack.packb(obj, use_bin_type=True)))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.text(max_size=200))
def test_random_text_frames(live: ServerThread, text: str):
    msgs = _fuzzer(live).exchange(text)
    check(msgs)
    assert msgs[0] == protocol.Error("bad_frame", "text frames are not accepted; send msgpack in a binary frame")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(junk=st.binary(min_size=1, max_size=200))
def test_random_bytes_where_frames_belong(live: ServerThread, junk: bytes):
    """Bytes that are not WebSocket framing at all, after a good handshake: the server
    closes that connection (1002 or 1009 or a reset), and nothing else."""
    sock = open_raw(live.server.port, rcvbuf=None)  # type: ignore[union-attr]
    try:
        sock.sendall(junk)
        sock.settimeout(5)
        try:
            sock.recv(4096)
        except (TimeoutError, ConnectionError):
            pass  # an incomplete frame: the server waits for the rest; closing is ours to do
    finally:
        sock.close()


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(junk=st.binary(min_size=1, max_size=300))
def test_random_bytes_instead_of_http(live: ServerThread, junk: bytes):
    with socket.create_connection(("127.0.0.1", live.server.port), timeout=5) as s:  # type: ignore[union-attr]
        s.sendall(junk + b"\r\n\r\n")
        try:
            reply = s.recv(4096)
        except (TimeoutError, ConnectionError):
            return
        assert reply == b"" or reply.startswith(b"HTTP/1.1 ")


def test_oversized_and_fragmented_frames(live: ServerThread):
    fuzz = _fuzzer(live)
    assert fuzz.exchange(b"\x00" * 70000) == []  # over max_message_bytes: closed with 1009
    sock = open_raw(live.server.port, rcvbuf=None)  # type: ignore[union-attr]
    try:
        # A fragmented message whose parts add up past the limit: also 1009.
        part = b"\x00" * 40000
        first = bytearray(frame(part)); first[0] = 0x02  # binary, not FIN
        sock.sendall(bytes(first))
        cont = bytearray(frame(part)); cont[0] = 0x80  # continuation, FIN
        sock.sendall(bytes(cont))
        sock.settimeout(5)
        opcode, payload = read_frame(sock)
        assert opcode == 0x2  # ready
        opcode, payload = read_frame(sock)
        assert opcode == 0x8 and int.from_bytes(payload[:2], "big") == 1009
    finally:
        sock.close()


def test_a_header_announcing_10_mib_is_refused_before_any_payload(live: ServerThread):
    sock = open_raw(live.server.port, rcvbuf=None)  # type: ignore[union-attr]
    try:
        assert read_frame(sock)[0] == 0x2  # ready
        t0 = time.monotonic()
        sock.sendall(bytes([0x82, 0x80 | 127]) + (10 * 2**20).to_bytes(8, "big") + b"\x00\x00\x00\x00")
        opcode, payload = read_frame(sock)
        assert opcode == 0x8 and int.from_bytes(payload[:2], "big") == 1009
        assert time.monotonic() - t0 < 1.0
    finally:
        sock.close()


def test_the_server_is_unharmed(live: ServerThread):
    """Last in this module: after all of the above a normal client is served, the thread
    queue is empty, no connection leaked and nothing was logged at warning or above."""
    well_behaved(live)
    good = live.good  # type: ignore[attr-defined]
    good.stop()
    # How many it finished depends on how long the fuzzing took (a quiet machine: a few
    # seconds); what matters is that it was served throughout and nothing failed.
    assert not good.failures and good.done >= 3, (good.done, good.failures)
    deadline = time.monotonic() + 10
    while (live.server.connections or live.service.worker.queue_depth) and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.05)
    assert live.server.connections == 0  # type: ignore[union-attr]
    bad = [r for r in live.problems.records if r.levelno >= logging.ERROR or r.exc_info]  # type: ignore[attr-defined]
    assert not bad, [r.getMessage() for r in bad]


_FUZZERS: dict[int, Fuzzer] = {}


def _fuzzer(srv: ServerThread) -> Fuzzer:
    if id(srv) not in _FUZZERS:
        _FUZZERS[id(srv)] = Fuzzer(srv)
    return _FUZZERS[id(srv)]
