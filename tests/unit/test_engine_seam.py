"""The engine seam (engines/base.py): a kind registered in one place is found, routed,
costed and warmed without any other module knowing its name."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from rtts.engines.base import AddVoice, Costs, Engine, EngineContext, VoiceInfo
from rtts.engines.registry import KINDS
from rtts.engines.voices import VoiceRegistry
from rtts.host.client import Host
from rtts.synthesis.inference import InferenceWorker
from rtts.synthesis.jobs import Job


class ToyEngine:
    key = "toy"
    sample_rate = 16000

    def __init__(self) -> None:
        self.loaded = False

    def load(self) -> None:
        self.loaded = True

    def unload(self) -> None:
        self.loaded = False

    def synthesize(self, text: str, voice: VoiceInfo, lang: str, speed: float, lead_s: float = 0.0) -> Iterator[np.ndarray]:
        yield np.zeros(1600, dtype=np.float32)

    def limit_run_memory(self, mb: float | None) -> None:
        pass


class ToyScan:
    def __init__(self) -> None:
        self.names: list[str] = []

    def builtin(self, add: AddVoice) -> None:
        pass

    def file(self, path: Path, add: AddVoice) -> bool:
        if path.suffix != ".toy":
            return False
        voice = VoiceInfo(f"toy/{path.stem}", path.stem, ("en",), "toy", 16000, "toy")
        if add(voice, path):
            self.names.append(path.stem)
        return True

    def engines(self, context: EngineContext, old: Mapping[str, Engine]) -> dict[str, Engine]:
        return {"toy": old.get("toy") or ToyEngine()} if self.names else {}


class ToyKind:
    name = "toy"
    costs = Costs(rtf=0.01, load_s=0.1, first_s_per_char=0.001)
    streams_in_unit = True
    first_unit_chars = 99
    first_unit_chars_by_lang = (("fr", 7),)
    lang_voices = (("en", "toy/b"),)
    host_ops = {"toy.echo": "builtins:str"}
    warmed: list[str] = []

    def scanner(self) -> ToyScan:
        return ToyScan()

    def warm_up(self, host: Host, langs: tuple[str, ...], cache_dir: Path | None = None) -> None:
        self.warmed.append(threading.current_thread().name)


def test_a_registered_kind_is_discovered_costed_and_routed(tmp_path: Path) -> None:
    (tmp_path / "a.toy").write_text("")
    (tmp_path / "b.toy").write_text("")
    (tmp_path / "c.onnx").write_bytes(b"not piper: no json")  # offered to Piper first, then to the toy kind
    toy = ToyKind()
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, toy))
    assert {"toy/a", "toy/b"} <= set(registry.voices)
    assert registry.engine_for("toy/a").key == "toy"
    assert registry.first_unit_chars("toy") == 99
    assert registry.first_unit_chars("toy", "fr") == 7 and registry.first_unit_chars("toy", "en") == 99
    assert toy in registry.kinds_in_use()
    # Text another voice cannot speak goes to the kind's preferred voice for its language.
    assert registry.lang_voices["en"].id == "toy/b"
    worker = InferenceWorker(registry, lambda callback: callback(), host=registry.host)
    assert worker.rtf["toy"] == 0.01 and worker.load_s["toy"] == 0.1
    job = Job("u", "hello", registry.get("toy/a"), "en", 1.0, 0.0)
    wait, load = worker.estimate(job)
    assert wait == 0.1  # the toy model is not loaded yet: its prior load time
    assert load == 0.0  # nothing else queued: alone, it delays nobody and is never late by load
    worker.warm_up([toy])
    done = threading.Event()
    worker.call(lambda: None, lambda error: done.set())  # control work runs in arrival order
    worker.start()
    assert done.wait(10)
    worker.stop()
    assert toy.warmed == ["rtts-inference"]
    # Its own requests to the inference process are served there.
    assert registry.host is not None
    assert registry.host.call("toy.echo", 42) == "42"
    registry.host.stop()


def test_an_error_in_control_work_reaches_its_caller(tmp_path: Path) -> None:
    # The error was posted as a closure over the except block's name, which Python unbinds
    # when the block ends: the callback raised NameError on the loop and the error was lost.
    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, ToyKind()))
    errors: list[BaseException | None] = []
    done = threading.Event()
    worker = InferenceWorker(registry, lambda callback: callback(), host=registry.host)

    def fail() -> None:
        raise RuntimeError("the model file is gone")

    worker.call(fail, lambda error: (errors.append(error), done.set()))
    worker.start()
    assert done.wait(10)
    worker.stop()
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError) and str(errors[0]) == "the model file is gone"
