"""The shipped Kokoro voices speaking Mandarin, Spanish and French through a real server."""

from __future__ import annotations

import json
import urllib.request

import pytest

from rtts import protocol
from rtts.engines.kokoro import KOKORO
from tests.conftest import Client, ServerThread
from tests.live.test_languages_e2e import stream, voiced

pytestmark = pytest.mark.slow

RATE = 24000


def speak(client: Client, utt_id: str, **fields: str) -> tuple[float, list[protocol.Mark], float]:
    """(seconds of audio, marks, RMS of the whole) of one utterance."""
    client.send(type="speak", id=utt_id, **fields)
    samples, marks = stream(client.utterance(utt_id, timeout=300), RATE, 20)
    return len(samples) / RATE, marks, voiced(samples, RATE, 0, len(samples))


def test_mandarin_without_voice_or_lang_gets_the_native_default(server: ServerThread, client: Client) -> None:
    zh_default = dict(KOKORO.lang_voices)["zh"]
    assert server.service.registry.lang_voices["zh"].id == zh_default
    seconds, marks, rms = speak(client, "zh", text="欢迎乘坐本次列车，下一站是杭州东站。")
    assert {(m.voice, m.lang) for m in marks} == {(zh_default, "zh")}
    assert zh_default.startswith("kokoro/z")  # a native Mandarin voice, not a Japanese one
    assert seconds > 2.0 and rms > 0.02
    # The Mandarin voice's short first unit, not the default English voice's (the whole
    # sentence was one unit, and first audio waited for all of it).
    assert [m.text for m in marks][:2] == ["欢迎乘坐本次列车，", "下一站是杭州东站。"]


def test_spanish_and_french_through_voice_and_lang(server: ServerThread, client: Client) -> None:
    # A Spanish voice and no lang: the voice says the Latin letters are Spanish, and
    # the time is read in Spanish ("a las diez y treinta").
    seconds, marks, rms = speak(client, "es", text="El próximo tren sale a las 10:30.", voice="kokoro/ef_dora")
    assert {(m.voice, m.lang) for m in marks} == {("kokoro/ef_dora", "es")}
    assert seconds > 1.5 and rms > 0.02
    # lang fr and no voice: the default (English-only Piper) hands French to the French voice.
    seconds, marks, rms = speak(client, "fr", text="Le prochain train part du quai 3 à 14 h 20.", lang="fr")
    assert {(m.voice, m.lang) for m in marks} == {("kokoro/ff_siwis", "fr")}
    assert seconds > 1.5 and rms > 0.02
    # pt is Brazilian Portuguese.
    _, marks, _ = speak(client, "pt", text="Obrigado pela sua visita.", lang="pt", voice="kokoro/pf_dora")
    assert {(m.voice, m.lang) for m in marks} == {("kokoro/pf_dora", "pt-br")}


def test_voices_endpoint_gives_language_gender_and_grade(server: ServerThread) -> None:
    with urllib.request.urlopen(server.http + "/voices", timeout=30) as r:
        voices = {v["id"]: v for v in json.load(r)}
    heart = voices["kokoro/af_heart"]
    assert (heart["langs"][0], heart["gender"], heart["grade"]) == ("en", "female", "A")
    assert voices["kokoro/zm_yunxi"]["langs"][0] == "zh" and voices["kokoro/zm_yunxi"]["gender"] == "male"
    assert {v["langs"][0] for v in voices.values()} >= {"en", "en-gb", "zh", "ja", "es", "fr", "it", "pt-br"}
