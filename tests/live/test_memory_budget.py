"""The memory budget with real voices, in a real ``rtts serve`` process (rtts/memory.py).

The server runs as its own process so that its RSS is the service's own, and a
sampler reads the server and its inference process together every 20 ms.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import openai

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rtts import protocol
from rtts.memory import anonymous_bytes

from tests.conftest import Client, RttsProcess

pytestmark = pytest.mark.slow

TEXTS = {
    "zh": "欢迎乘坐本次列车，下一站是杭州东站。请您提前做好下车准备。",
    "ja": "次の駅は東京です。お忘れ物のないようご注意ください。",
    "en": "The next train leaves from platform four.",
}


def readyz(server: RttsProcess) -> dict:
    with urllib.request.urlopen(server.http + "/readyz", timeout=30) as r:
        return json.loads(r.read())


class Sampler:
    """The peak anonymous memory (what the budget counts: RSS less file-backed pages) of a
    process and its children, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                total = sum(anonymous_bytes(p.pid) for p in (self.proc, *self.proc.children(recursive=True)))
            except psutil.Error:
                continue
            self.peak = max(self.peak, total)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(2)
        return self.peak


def speak(client: Client, utt: str, text: str) -> list[protocol.ServerMessage]:
    client.send(type="speak", id=utt, text=text)  # no voice, no lang: the path users take
    return client.utterance(utt, timeout=180)


def test_languages_take_turns_within_the_budget(tmp_path: Path) -> None:
    # In 340 MB Kokoro fits with its Mandarin and Japanese front ends, and Hibari (the
    # English voice) alone, but not all of them: going from Kokoro's languages to
    # English and back ends the inference process to make room.
    with RttsProcess(tmp_path, "--memory-budget", "340") as server:
        server.wait_listening()
        sampler = Sampler(server.proc.pid)
        with Client(server.url) as client:
            ready = client.recv()
            assert isinstance(ready, protocol.Ready) and ready.limits["memory_budget_mb"] == 340
            for n, lang in enumerate(["zh", "ja", "zh", "en", "ja"]):
                got = speak(client, f"u{n}", TEXTS[lang])
                errors = [m for m in got if isinstance(m, protocol.Error)]
                assert not errors, (lang, errors)
                assert sum(isinstance(m, protocol.Audio) for m in got) > 20, lang
                assert got[-1].reason == "done", lang  # type: ignore[union-attr]
        peak = sampler.stop()
        state = readyz(server)["memory"]
    assert state["budget_mb"] == 340
    assert state["restarts"] >= 1 and state["refusals"] == 0, state
    assert peak <= 340 * 1024 * 1024, f"peak {peak / 2**20:.0f} MB over the 340 MB budget"
    assert "memory budget (" in server.log  # the log names the job that made room


def test_a_voice_that_cannot_fit_is_refused_and_the_connection_goes_on(tmp_path: Path) -> None:
    with RttsProcess(tmp_path, "--memory-budget", "200") as server:
        server.wait_listening()
        with Client(server.url) as client:
            client.recv()
            got = speak(client, "zh", TEXTS["zh"])
            assert [m.code for m in got if isinstance(m, protocol.Error)] == ["memory_budget"]
            assert not any(isinstance(m, protocol.Audio) for m in got)
            client.send(type="ping", id="p")
            assert isinstance(client.until(protocol.Pong)[-1], protocol.Pong)
        # Plain HTTP and the OpenAI route answer the refusal with its status, before any body.
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(server.http + "/tts?text=" + urllib.parse.quote(TEXTS["zh"]), timeout=60)
        assert refused.value.code == 503 and refused.value.read().startswith(b"memory_budget:")
        api = openai.OpenAI(base_url=server.http + "/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.APIStatusError) as failed:
            api.audio.speech.create(model="tts-1", voice="alloy", input=TEXTS["en"], response_format="wav")
        assert failed.value.status_code == 503 and failed.value.body["code"] == "memory_budget"  # type: ignore[index]
        # So do the captioned routes: Kokoro-FastAPI's, streamed, and /tts's subtitles.
        with pytest.raises(openai.APIStatusError) as failed:
            openai.OpenAI(base_url=server.http, api_key="none", max_retries=0).post(
                "/dev/captioned_speech", cast_to=object, body={"input": TEXTS["zh"], "stream": True})
        assert failed.value.status_code == 503 and failed.value.body["code"] == "memory_budget"  # type: ignore[index]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(server.http + "/tts?captions=vtt&text=" + urllib.parse.quote(TEXTS["zh"]), timeout=60)
        assert refused.value.code == 503 and refused.value.read().startswith(b"memory_budget:")
        state = readyz(server)["memory"]
        with urllib.request.urlopen(server.http + "/metrics", timeout=30) as r:
            metrics = r.read().decode()
    assert state["refusals"] >= 3
    values = {s.name: s.value for family in text_string_to_metric_families(metrics) for s in family.samples}
    assert values["rtts_memory_budget_bytes"] == 200 * 1024 * 1024
    assert values["rtts_memory_refusals_total"] == state["refusals"]
