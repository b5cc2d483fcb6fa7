"""Hibari "heart" through a real server: WebSocket, /tts, ``rtts say``, markup, lexicon, idle unload."""

from __future__ import annotations

import subprocess
import sys
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from rtts import protocol
from rtts.engines.registry import KINDS
from rtts.engines.voices import VoiceRegistry
from rtts.text.lexicon import Lexicon
from tests.conftest import Client, ServerThread, make_config
from tests.live.test_server import check_stream, check_tts_wav, is_speech

pytest.importorskip("hibari")
pytestmark = pytest.mark.slow

HIBARI = "hibari/heart"
SENTENCE = "The 10:30 train to Boston leaves from platform 4."
LONG = (
    "When the evening train finally pulled into the station, the passengers gathered their bags, "
    "thanked the conductor and stepped out onto the cold and windy platform"
)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("hibari")
    registry = VoiceRegistry.discover(tmp, tmp, 1, kinds=KINDS)
    yield registry
    registry.engine_for(HIBARI).unload()


@pytest.fixture(scope="module")
def engine(registry):  # type: ignore[no-untyped-def]
    return registry.engine_for(HIBARI)


def test_the_voice_is_listed_after_a_plain_install() -> None:
    out = subprocess.run([sys.executable, "-m", "rtts", "voices"], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent)
    line = next(line for line in out.stdout.splitlines() if line.startswith(HIBARI))
    assert line.split()[1:3] == ["hibari", "en"] and "24000" in line.split() and line.endswith("(default)")


def test_numbers_go_through_rtts_normalizer_and_lexicon_phonemes_pass(engine) -> None:  # type: ignore[no-untyped-def]
    # Hibari's own front end reads "4821" as "forty-eight twenty-one"; rtts's reads the number.
    assert "θˈWzᵊnd" in engine.phonemize("Order 4821.")
    lexicon = Lexicon.parse("Nguyen = /wˈɪn/")
    assert "wˈɪn" in engine.phonemize(lexicon.apply("Mister Nguyen."))


def test_a_long_unit_streams_in_windows(registry, engine) -> None:  # type: ignore[no-untyped-def]
    voice = registry.get(HIBARI)
    pieces = list(engine.synthesize(LONG, voice, "en", 1.0))
    assert len(pieces) >= 4  # a first window, then windows of 64 frames
    audio = np.concatenate(pieces)
    is_speech(audio, 24000, LONG)
    # Leading silence (the model's pads) is trimmed from the first window: sound at once.
    assert float(np.abs(pieces[0][:2400]).max()) > 0.01
    with pytest.raises(ValueError):
        engine.synthesize("Bonjour.", voice, "fr", 1.0)


def test_a_new_inference_process_loads_hibari_again_by_itself(registry, engine) -> None:  # type: ignore[no-untyped-def]
    import os
    import signal

    voice = registry.get(HIBARI)
    assert np.concatenate(list(engine.synthesize("Before.", voice, "en", 1.0))).size
    host = engine._host
    os.kill(host.pid, signal.SIGKILL)  # a crash in the inference process
    deadline = time.monotonic() + 10
    while host.running and time.monotonic() < deadline:
        time.sleep(0.05)
    audio = np.concatenate(list(engine.synthesize("After the crash.", voice, "en", 1.0)))
    is_speech(audio, 24000, "After the crash.")


def test_speaks_over_websocket_with_markup(client: Client) -> None:
    client.send(type="speak", id="h", text=SENTENCE, voice=HIBARI)
    msgs = client.utterance("h")
    assert msgs[0].voice == HIBARI
    plain = check_stream(msgs, "h", 24000, 20, 2)
    is_speech(plain, 24000, SENTENCE)
    text = 'Meet the <sub alias="World Health Organization">WHO</sub> at gate <say-as interpret-as="characters">B12</say-as>.'
    client.send(type="speak", id="m", text=text, voice=HIBARI)
    marked = check_stream(client.utterance("m"), "m", 24000, 20, 2)
    client.send(type="speak", id="n", text="Meet the WHO at gate B12.", voice=HIBARI)
    bare = check_stream(client.utterance("n"), "n", 24000, 20, 2)
    assert len(marked) > len(bare) + 0.5 * 24000  # "World Health Organization" and "B one two" take longer


def test_http_tts_returns_a_wav(server: ServerThread) -> None:
    check_tts_wav(server, SENTENCE, HIBARI, 16000)


def test_rtts_say_writes_a_wav_and_the_server_never_imports_hibari(tmp_path: Path) -> None:
    # Hibari's G2P (106 MB of lexicons) and DSP (scipy.fft) live in the inference process.
    out = tmp_path / "say.wav"
    script = (
        "import sys\n"
        "from rtts.__main__ import main\n"
        f"assert main(['say', {SENTENCE!r}, '--voice', {HIBARI!r}, '-o', {str(out)!r},"
        f" '--models-dir', {str(tmp_path)!r}]) == 0\n"
        "print(sorted({'hibari', 'scipy', 'onnxruntime'} & set(sys.modules)))\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parent.parent)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[]"
    with wave.open(str(out)) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768
        rate = w.getframerate()
    is_speech(pcm, rate, SENTENCE)


def test_idle_unload_and_reload(tmp_path: Path) -> None:
    with ServerThread(make_config(tmp_path, idle_unload=1.0)) as srv:
        for n, utt in enumerate(("a", "b"), 1):
            with Client(srv.url) as c:
                assert isinstance(c.recv(), protocol.Ready)
                c.send(type="speak", id=utt, text="Hello there.", voice=HIBARI)
                check_stream(c.utterance(utt), utt, 24000, 20, 2)
            deadline = time.monotonic() + 20
            while srv.service.worker.unloads < n and time.monotonic() < deadline:
                time.sleep(0.1)
            assert srv.service.worker.unloads == n and srv.service.loaded_voices() == []
