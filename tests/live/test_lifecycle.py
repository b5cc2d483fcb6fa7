"""Slow and stuck clients, SIGTERM, SIGHUP and broken models, on real servers and processes."""

from __future__ import annotations

import json
import logging
import shutil
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from rtts import protocol
from rtts.engines.piper import BUILTIN as _BUILTIN_PIPER
from rtts.engines.registry import DEFAULT_VOICE

from tests.conftest import Client, RttsProcess, ServerThread, make_config
from tests.rawws import open_raw, send_msg

pytestmark = pytest.mark.slow

PIPER = "piper/en_US-joe-medium"
PARAGRAPH = (
    "Good morning, and welcome aboard. The next stop is Central Station, where you can change "
    "for the airport line. Please mind the gap when leaving the train."
)


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def builtin_piper() -> Path:
    import importlib.util

    spec = importlib.util.find_spec(_BUILTIN_PIPER[0])
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "data" / f"{_BUILTIN_PIPER[1]}.onnx"


def wait_until(check, timeout: float = 10, step: float = 0.05):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(step)
    return check()


# ---------------------------------------------------------------- slow and stuck clients


def test_a_client_that_stops_reading_is_dropped_and_others_carry_on(tmp_path):
    cfg = make_config(tmp_path, send_buffer=65536, send_stall=2.0)
    with ServerThread(cfg) as srv:
        worker = srv.service.worker
        stuck = open_raw(srv.server.port, rcvbuf=4096)  # type: ignore[union-attr]
        send_msg(stuck, type="speak", id="s", text=PARAGRAPH * 6, voice=PIPER)  # ~60 s of audio
        t0 = time.monotonic()
        with Client(srv.url) as good:
            good.recv()
            for i in range(3):  # served normally, one after another, while the other is stuck
                good.send(type="speak", id=f"g{i}", text=PARAGRAPH, voice=PIPER)
                msgs = good.utterance(f"g{i}")
                assert msgs[-1].reason == "done"
                assert not [m for m in msgs if isinstance(m, protocol.Error)]
            assert wait_until(lambda: srv.service.metrics.stalled._value.get() == 1, timeout=30)
            dropped_after = time.monotonic() - t0
            assert wait_until(lambda: srv.server.connections == 1)  # type: ignore[union-attr]
            good.send(type="ping", t=1)
            assert good.until(protocol.Pong)[-1].t == 1
        # Synthesis for it paused once its buffer filled: far fewer units ran than it asked for.
        assert wait_until(lambda: worker.queue_depth == 0)
        assert worker.jobs_done < 3 * 3 + 12, worker.jobs_done
        # Its buffer stayed within the limit plus the unit being synthesized (< 10 s of 24 kHz audio).
        assert srv.server.send_peak < 65536 + 10 * 48000  # type: ignore[union-attr]
        assert dropped_after < 25
        with pytest.raises(OSError):
            for _ in range(100):  # the server reset the connection: reading hits its end
                if not stuck.recv(65536):
                    raise ConnectionResetError
        stuck.close()


def test_a_slow_reader_is_paced_not_dropped(tmp_path):
    # This reader takes about as long as the audio lasts. On loopback (MSS 64 KiB) TCP
    # reopens its window in steps of about 128 KiB, which such a reader needs ~3 s to
    # free: the stall limit must be well above that, or a reader that keeps reading
    # looks stalled. (The stall itself is tested with a client that reads nothing.)
    cfg = make_config(tmp_path, send_buffer=16384, send_stall=15.0)
    with ServerThread(cfg) as srv:
        with Client(srv.url, max_queue=2) as slow:
            slow.recv()
            slow.send(type="speak", id="p", text=PARAGRAPH, voice=PIPER)
            msgs = []
            while not msgs or not isinstance(msgs[-1], protocol.End):
                msgs.append(slow.recv())
                if len(msgs) % 50 == 0:
                    time.sleep(1.0)  # stops reading for a second, five times over
            frames = [m for m in msgs if isinstance(m, protocol.Audio)]
            assert msgs[-1].reason == "done" and [f.seq for f in frames] == list(range(len(frames)))
        assert srv.service.metrics.stalled._value.get() == 0
        assert srv.server.send_peak < 16384 + 10 * 48000  # type: ignore[union-attr]


# ---------------------------------------------------------------- SIGTERM


def test_sigterm_drains_then_closes_everyone_with_1001_and_exits_0(tmp_path):
    with RttsProcess(tmp_path, "--drain-grace", "1.5", "--shutdown-timeout", "6", "--send-stall", "60") as proc:
        proc.wait_listening()
        busy, idle = Client(proc.url), Client(proc.url)
        busy.recv(), idle.recv()
        busy.send(type="speak", id="b", text=PARAGRAPH * 4, voice=PIPER)
        busy.until(protocol.Audio)
        stuck = open_raw(proc.port, rcvbuf=4096)
        send_msg(stuck, type="speak", id="s", text=PARAGRAPH * 4, voice=PIPER)
        assert get(proc.http + "/readyz")[0] == 200
        t0 = time.monotonic()
        proc.signal(signal.SIGTERM)
        # Draining: still connected, but not ready, and new WebSockets are turned away.
        assert wait_until(lambda: get(proc.http + "/readyz")[0] == 503, timeout=1.5)
        assert json.loads(get(proc.http + "/readyz")[1])["draining"] is True
        with pytest.raises(InvalidStatus) as info:
            Client(proc.url)
        assert info.value.response.status_code == 503
        codes = []
        for c in (busy, idle):
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    c.recv(timeout=10)
            codes.append(closed.value.rcvd.code if closed.value.rcvd else None)
        assert codes == [1001, 1001]
        assert 1.3 < time.monotonic() - t0  # the grace was kept
        assert proc.proc.wait(10) == 0
        assert time.monotonic() - t0 < 6 + 1
        stuck.close()
        busy.close(), idle.close()
    assert "shutting down" in proc.log and "stopped" in proc.log
    assert "Traceback" not in proc.log


def test_sigterm_when_idle_is_quick(tmp_path):
    with RttsProcess(tmp_path) as proc:
        proc.wait_listening()
        t0 = time.monotonic()
        assert proc.stop() == 0
        assert time.monotonic() - t0 < 3


# ---------------------------------------------------------------- SIGHUP and broken models


def test_sighup_rescans_the_models_dir(tmp_path):
    with RttsProcess(tmp_path) as proc:
        proc.wait_listening()
        models = tmp_path / "models"
        (models / "extra.onnx").symlink_to(builtin_piper())
        shutil.copy(builtin_piper().with_name(builtin_piper().name + ".json"), models / "extra.onnx.json")
        proc.signal(signal.SIGHUP)
        proc.wait_for(r"rescan: \d+ voices; added piper/extra; removed none")
        ids = [v["id"] for v in json.loads(get(proc.http + "/voices")[1])]
        assert "piper/extra" in ids
        with Client(proc.url) as c:
            ready = c.recv()
            assert "piper/extra" in [v["id"] for v in ready.voices]
            c.send(type="speak", id="x", text="A new voice.", voice="piper/extra")
            assert c.utterance("x")[-1].reason == "done"
        (models / "extra.onnx").unlink()
        proc.signal(signal.SIGHUP)
        proc.wait_for(r"added none; removed piper/extra")
        assert proc.stop() == 0


def test_a_broken_model_fails_alone(tmp_path, caplog: pytest.LogCaptureFixture):
    cfg = make_config(tmp_path)
    models = cfg.models_dir
    (models / "broken.onnx").write_bytes(b"this is not an onnx model" * 100)
    shutil.copy(builtin_piper().with_name(builtin_piper().name + ".json"), models / "broken.onnx.json")
    caplog.set_level(logging.INFO)
    with ServerThread(cfg) as srv, Client(srv.url) as c:
        ready = c.recv()
        assert "piper/broken" in [v["id"] for v in ready.voices]
        for attempt in range(2):  # a failed load is retried on the next request, and fails alike
            c.send(type="speak", id=f"b{attempt}", text="Hello.", voice="piper/broken")
            msgs = c.utterance(f"b{attempt}")
            err = [m for m in msgs if isinstance(m, protocol.Error)]
            assert [e.code for e in err] == ["engine_unavailable"] and err[0].id == f"b{attempt}"
            assert msgs[-1].reason == "error"
        c.send(type="speak", id="ok", text="The others keep working.", voice=PIPER)
        assert c.utterance("ok")[-1].reason == "done"
        c.send(type="speak", id="ok2", text="So does Kokoro.", voice="kokoro/jf_alpha")
        assert c.utterance("ok2")[-1].reason == "done"
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("cannot load piper/broken" in line and "broken.onnx" in line for line in lines), lines
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def test_preload_loads_before_ready(tmp_path):
    with RttsProcess(tmp_path, "--preload") as proc:
        proc.wait_listening()
        status, body = get(proc.http + "/readyz")
        line = proc.wait_for(r"loaded \S+ in")
        assert line
        assert wait_until(lambda: DEFAULT_VOICE in json.loads(get(proc.http + "/readyz")[1])["loaded"])
        assert status == 200
        assert proc.stop() == 0


def test_port_in_use_is_a_clear_error(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with RttsProcess(tmp_path, port=port) as proc:
            assert proc.proc.wait(60) == 1
            proc.wait_for(rf"cannot listen on 127.0.0.1 port {port}: .*address already in use")
            assert "Traceback" not in proc.log


@pytest.mark.slow
def test_readyz_reports_loads_while_they_happen(tmp_path):
    # /readyz reads the worker's set of models being loaded on the event loop while the
    # inference thread changes it: the set is replaced, never changed in place.
    import urllib.request

    with ServerThread(make_config(tmp_path, idle_unload=0.0)) as srv:
        worker = srv.service.worker
        model = srv.service.registry.voices[srv.service.registry.default_voice].model
        seen: list[list[str]] = []
        for round_ in range(1, 4):
            worker.preload(model)
            worker.unload_all()
            deadline = time.monotonic() + 60
            while worker.unloads < round_ and time.monotonic() < deadline:
                with urllib.request.urlopen(srv.http + "/readyz", timeout=10) as r:
                    assert r.status == 200
                    seen.append(json.loads(r.read())["loading"])
        assert [model] in seen and [] in seen
        assert worker.loads == 3


def test_sighup_rescan_touches_engines_on_the_inference_thread_only(tmp_path, monkeypatch):
    # engines/base.py: only the inference thread calls into an engine. A rescan reads the
    # files elsewhere and adopts them there (Kokoro is told of its style files then).
    from rtts.engines.kokoro import KokoroEngine

    threads: list[str] = []
    original = KokoroEngine.set_style_files

    def record(self, style_files):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread().name)
        return original(self, style_files)

    monkeypatch.setattr(KokoroEngine, "set_style_files", record)
    with ServerThread(make_config(tmp_path)) as srv:
        srv.call(srv.service.rescan())
    assert threads == ["rtts-inference"]
