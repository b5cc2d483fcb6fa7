"""The engine seam (engines/base.py): a kind registered in one place is found, routed,
costed and warmed without any other module knowing its name."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest

from rtts.engines.base import AddVoice, Costs, Engine, EngineContext, VoiceInfo
from rtts.engines.registry import KINDS
from rtts.engines.voices import VoiceRegistry
from rtts.host.client import Host
from rtts.synthesis.inference import InferenceWorker
from rtts.synthesis.jobs import Job
from rtts.synthesis.phrase_cache import PhraseCache


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
    wait, load, _ = worker.estimate(job)
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


def test_a_stream_that_waits_for_room_is_told_how_long_by_what_the_others_still_say(tmp_path: Path) -> None:
    """Issue 32: ``start.expected_wait_ms`` of a queued stream counts the wait for room, from
    each stream's unit left and the rest of its utterance (``Job.rest_chars``)."""
    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, ToyKind()))
    worker = InferenceWorker(registry, lambda callback: callback(), host=registry.host)
    voice = registry.get("toy/a")
    worker.rtf["toy"] = 0.4
    worker.audio_s_per_char["toy:en"] = 0.05  # a unit of "hello": 0.4 * 5 * 0.05 = 0.1 s of compute
    registry.engines[voice.model].loaded = True  # no load to wait for
    try:
        def wait_behind(rest_a: int, rest_b: int) -> float:
            for name, rest in (("a", rest_a), ("b", rest_b)):
                worker.submit(Job(name, "hello", voice, "en", 1.0, 0.0, rest_chars=rest))
            wait, load, audio = worker.estimate(Job("c", "hello", voice, "en", 1.0, 0.0), room=1.0)
            assert load == pytest.approx(1.2)
            assert audio > wait  # and then its first run
            with worker._cond:  # the thread is not started: the queue is emptied by hand
                worker._heap.clear()
            return wait

        # b has nothing after its unit: it ends after about 0.2 s (a's first run, b's unit
        # and a's pieces between), and a with c is 0.8.
        assert wait_behind(1000, 0) == pytest.approx(0.2, abs=0.02)
        # b says 200 characters more (4 s of compute): c waits until b ends, a's units and
        # b's taking turns, ~2 x 4.1 s.
        assert wait_behind(1000, 200) == pytest.approx(8.2, abs=0.11)
        # Without room asked for, it goes at once: the thread starts on it after the first
        # runs of the two that asked before it, whose audio then runs out after its own.
        worker.submit(Job("a", "hello", voice, "en", 1.0, 0.0, rest_chars=1000))
        worker.submit(Job("b", "hello", voice, "en", 1.0, 0.0, rest_chars=1000))
        first_run = worker._first_s(Job("a", "hello", voice, "en", 1.0, 0.0))
        wait, _, audio = worker.estimate(Job("c", "hello", voice, "en", 1.0, 0.0))
        assert 0 < first_run < 0.1 and wait == pytest.approx(2 * first_run) and audio == pytest.approx(3 * first_run)
    finally:
        if registry.host is not None:
            registry.host.stop()


def test_a_mixed_streams_rest_counts_each_script_at_its_own_voice(tmp_path: Path) -> None:
    """Issue 32: what a stream still has to say, in compute seconds, counts its Chinese
    characters at its Chinese voice and its Latin letters at its English one; counted all
    at the costliest, a mixed stream was told its first audio 2-2.7 s late."""
    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, ToyKind()))
    worker = InferenceWorker(registry, lambda callback: callback(), host=registry.host)
    english = registry.get("toy/a")
    chinese = VoiceInfo("toy/zh", "Z", ("zh",), "toy", 24000, "toy/zh")
    worker.lang_rtf.update({"toy:en": 0.02, "toy:zh": 0.4})
    worker.audio_s_per_char.update({"toy:en": 0.06, "toy:zh": 0.25})
    try:
        mixed = Job("u", "Welcome aboard,", english, "en", 1.0, 0.0, rest_chars=100, rest_cjk=40, voices=(chinese,))
        assert worker._rest_s(mixed) == pytest.approx(40 * 0.4 * 0.25 + 60 * 0.02 * 0.06)
        # A stream in one language is as before: every character at its voice.
        alone = Job("u", "你好。", chinese, "zh", 1.0, 0.0, rest_chars=100, rest_cjk=90)
        assert worker._rest_s(alone) == pytest.approx(100 * 0.4 * 0.25)
    finally:
        if registry.host is not None:
            registry.host.stop()


def test_a_stream_counts_at_its_languages_rtf(tmp_path: Path) -> None:
    """Issue 32: the load is the streams' RTFs in their own languages, learned as units run;
    an engine's mean let two streams of its costliest language in at once."""
    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, ToyKind()))
    worker = InferenceWorker(registry, lambda callback: callback(), host=registry.host)
    voice = registry.get("toy/a")
    worker.rtf["toy"] = 0.3  # the engine's mean
    worker.lang_rtf["toy:zh"] = 0.45
    try:
        worker.submit(Job("a", "你好", voice, "zh", 1.0, 0.0))
        assert worker.estimate(Job("b", "你好", voice, "zh", 1.0, 0.0))[1] == pytest.approx(0.9)
        assert worker.estimate(Job("b", "hello", voice, "en", 1.0, 0.0))[1] == pytest.approx(0.75)
        assert worker.streams("toy", 0.7) == 1  # at Mandarin's 0.45, not the mean's 0.3
    finally:
        if registry.host is not None:
            registry.host.stop()


def test_a_stream_without_room_waits_until_one_ends(tmp_path: Path) -> None:
    """Issue 32: a stream's first job with ``room`` goes to the thread only while the load
    of the streams there, its own with them, is within it; the others are served meanwhile,
    and a stream between two of its units (its next job on its way) still counts."""
    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, ToyKind()))
    gap = 3.0  # longer than the module's: "still waits" must hold on a loaded box
    worker = InferenceWorker(registry, lambda callback: callback(), host=registry.host, stream_gap_s=gap)
    voice = registry.get("toy/a")
    worker.rtf["toy"] = 0.4  # two streams fit in a load of 1.0, not three
    order: list[str] = []
    done = {name: threading.Event() for name in ("a", "b", "c", "a2")}

    def job(name: str, room: float | None = None, last: bool = False) -> Job:
        j = Job(name.rstrip("2"), "hello", voice, "en", 1.0, 0.0, room=room, last=last)
        j.sink = lambda job, event: (order.append(name), done[name].set()) if type(event).__name__ == "JobDone" else None
        return j

    worker.submit(job("a"))
    worker.submit(job("b"))
    waiting = job("c", room=1.0)
    worker.submit(waiting)  # a and b are queued: 0.4 + 0.4 + 0.4 > 1.0
    assert worker.waiting == 1 and worker.queue_depth == 2
    worker.start()
    try:
        assert done["a"].wait(10) and done["b"].wait(10)
        # a and b ended a moment ago: their next units may be on their way, so c still waits.
        assert not done["c"].wait(0.3) and worker.waiting == 1
        worker.submit(job("a2"))  # a's next unit: a stream goes on, c waits on
        assert done["a2"].wait(10)
        assert not done["c"].wait(0.3)
        # Then nothing more comes from b: after the gap it has room (a alone: 0.8 <= 1.0).
        assert done["c"].wait(10 * gap)
        assert order == ["a", "b", "a2", "c"] and worker.waiting == 0
        # c waited from its submit, the thread idle through most of the gaps (/metrics).
        waited, idle = worker.contended()
        assert gap < waited < 10 * gap and gap / 2 < idle < waited
        # A stream's last unit takes it off the thread as soon as it ends: no gap.
        done["d"], done["e"] = threading.Event(), threading.Event()
        time.sleep(gap)  # c's gap is over
        worker.submit(job("d", last=True))
        assert done["d"].wait(10)
        worker.submit(job("e", room=0.5))  # d + e would be 0.8: but d is over
        assert done["e"].wait(gap / 2)
        # A cancelled waiting stream is forgotten, never run.
        gone = job("c", room=0.1)
        worker.submit(job("b"))
        worker.submit(gone)
        worker.drop(gone)
        assert worker.waiting == 0
    finally:
        worker.stop()
        if registry.host is not None:
            registry.host.stop()


def test_a_stream_whose_last_unit_comes_from_the_phrase_cache_leaves_room_at_once(tmp_path: Path) -> None:
    """A unit answered from the phrase cache never reaches the thread; where it is its
    stream's last, the stream is off the thread at once, as after a last unit made there:
    it counted as between two units for the gap after its unit before, and a stream waiting
    for room waited that long with the thread idle."""
    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, ToyKind()))
    gap = 5.0  # far longer than the wait allowed below, on a loaded box too
    worker = InferenceWorker(registry, lambda callback: callback(), cache=PhraseCache(1 << 20), host=registry.host,
                             stream_gap_s=gap)
    registry.engines["toy"] = SlowToy()  # RTF 0.4 or more, as measured: a and c do not fit in 0.5
    voice = registry.get("toy/a")
    worker.rtf["toy"] = 0.4
    done = {name: threading.Event() for name in ("a", "a2", "c")}

    names: dict[int, str] = {}

    def sink(job: Job, event: object) -> None:  # one sink, as one session's: a's units are one stream
        if type(event).__name__ == "JobDone":
            done[names[id(job)]].set()

    def job(name: str, room: float | None = None, last: bool = False) -> Job:
        text = "doors closing" if name == "c" else "hello"
        j = Job(name.rstrip("2"), text, voice, "en", 1.0, time.monotonic(), room=room, last=last)
        j.sink, names[id(j)] = sink, name
        return j

    worker.start()
    try:
        worker.submit(job("a"))  # made on the thread, and kept by the cache
        assert done["a"].wait(10)
        worker.submit(job("c", room=0.5))
        assert not done["c"].wait(0.3) and worker.waiting == 1  # a is between two units
        asked = time.monotonic()
        worker.submit(job("a2", last=True))  # a's last unit: the same text, from the cache
        assert done["a2"].wait(1) and worker.cache.hits == 1
        assert done["c"].wait(gap / 2), "c waited out the gap of a stream that had ended"
        assert time.monotonic() - asked < gap / 2
        waited, idle = worker.contended()
        assert 0.3 < waited < gap / 2 and idle > 0.25  # it waited on an idle thread until a ended
    finally:
        worker.stop()
        if registry.host is not None:
            registry.host.stop()


def _crowd(tmp_path: Path) -> tuple[VoiceRegistry, InferenceWorker, VoiceInfo, Engine]:
    """A worker (not started) over the toy kind, its streams at an RTF of 0.2 each."""
    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, ToyKind()))
    worker = InferenceWorker(registry, lambda callback: callback(), host=registry.host)
    worker.rtf["toy"] = 0.2
    return registry, worker, registry.get("toy/a"), registry.engines["toy"]


def test_a_stream_that_fits_waits_for_the_streams_there_to_hold_audio_for_a_crowd(tmp_path: Path) -> None:
    """Issue 32: where runs have a fixed part (``run_overhead_s``), a stream that fits by
    load goes in once each stream there holds its first run and a turn of the crowd's
    audio (``room.crowd_ready``): not beside one that has no audio yet."""
    registry, worker, voice, engine = _crowd(tmp_path)
    done = {name: threading.Event() for name in ("a", "b")}

    def job(name: str, room: float | None = None) -> Job:
        j = Job(name, "hello", voice, "en", 1.0, time.monotonic(), room=room, last=True)
        j.sink = lambda job, event: done[name].set() if type(event).__name__ == "JobDone" else None
        return j

    try:
        worker.submit(job("a"))  # on the heap, no audio yet
        worker.submit(job("b", room=1.0))  # 0.2 + 0.2 fits; no fixed part: it goes at once
        assert worker.waiting == 0 and worker.queue_depth == 2
        engine.run_overhead_s = lambda lang, generator: 0.1  # type: ignore[attr-defined]
        worker.submit(job("b", room=1.0))  # now it waits for a's audio: 0.2 / (1 - 0.6) s at least
        assert worker.waiting == 1
        # The next is told the load with the one waiting ahead of it, which goes in first.
        assert worker.estimate(job("c"), room=1.0).load == pytest.approx(0.8)
        # a's listener comes to hold 5 s (as its chunks would make it): the crowd is ready.
        with worker._cond:
            for entry in worker._heap:
                assert entry.job is not None
                entry.job.deadline = time.monotonic() + 5.0
        worker.start()
        assert done["a"].wait(10) and done["b"].wait(10) and worker.waiting == 0
    finally:
        worker.stop()
        if registry.host is not None:
            registry.host.stop()


def test_a_stream_waiting_for_the_crowd_goes_in_between_the_runs_of_a_unit(tmp_path: Path) -> None:
    """Issue 32: a stream that fits by load and waits for the audio of the streams there
    goes in as soon as they hold it, between two chunks of a unit made in runs, not when
    that unit ends: looked at only between jobs, streams told they would start at once
    waited for a whole sentence."""
    registry, worker, voice, engine = _crowd(tmp_path)
    engine.run_overhead_s = lambda lang, generator: 0.1  # type: ignore[attr-defined]
    runs = 40  # 0.1 s of audio each: a holds what b needs (~0.34 s) after a few of them
    made: list[str] = []
    done = {name: threading.Event() for name in ("a", "b")}

    def synthesize(text: str, voice: VoiceInfo, lang: str, speed: float, lead_s: float = 0.0) -> Iterator[np.ndarray]:
        for _ in range(runs if text == "long" else 1):
            time.sleep(0.002)
            made.append(text)
            yield np.zeros(1600, dtype=np.float32)

    engine.synthesize = synthesize  # type: ignore[method-assign]

    def job(name: str, text: str, room: float | None = None) -> Job:
        j = Job(name, text, voice, "en", 1.0, time.monotonic(), room=room, last=True)
        j.sink = lambda job, event: done[name].set() if type(event).__name__ == "JobDone" else None
        return j

    try:
        worker.submit(job("a", "long"))
        worker.submit(job("b", "hello", room=1.0))  # fits by load, but a holds no audio yet
        assert worker.waiting == 1
        worker.start()
        assert done["a"].wait(10) and done["b"].wait(10) and worker.waiting == 0
        # b's one run came while a's unit was still being made.
        assert 0 < made.index("hello") < runs
    finally:
        worker.stop()
        if registry.host is not None:
            registry.host.stop()


def test_a_load_no_one_asked_for_waits_while_a_stream_is_between_units(tmp_path: Path) -> None:
    """Issue 32: ``preload(urgent=False)`` (the default voice, on a connection) runs only
    once no stream is between two of its units. Between units the queue is empty for the
    moment the next one takes to come from the event loop; a load taken there made a
    Mandarin stream's second unit 0.4 s late."""
    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, ToyKind()))
    gap = 2.0
    worker = InferenceWorker(registry, lambda callback: callback(), host=registry.host, stream_gap_s=gap)
    voice = registry.get("toy/a")
    order: list[str] = []
    done = {name: threading.Event() for name in ("a", "a2", "load")}

    def job(name: str, last: bool = False) -> Job:
        j = Job("a", "hello", voice, "en", 1.0, 0.0, last=last)
        j.sink = lambda job, event: (order.append(name), done[name].set()) if type(event).__name__ == "JobDone" else None
        return j

    worker.start()
    try:
        worker.submit(job("a"))
        assert done["a"].wait(10)
        worker.preload("toy", lambda ok: (order.append("load"), done["load"].set()), urgent=False)
        assert not done["load"].wait(0.5), "loaded while the stream's next unit was on its way"
        worker.submit(job("a2", last=True))  # the next unit comes: it goes first
        assert done["a2"].wait(10) and done["load"].wait(10)
        assert order == ["a", "a2", "load"]
        # With no stream on the thread it runs at once.
        done["load"].clear()
        worker.preload("toy", lambda ok: done["load"].set(), urgent=False)
        assert done["load"].wait(gap / 2)
    finally:
        worker.stop()
        if registry.host is not None:
            registry.host.stop()


def test_a_job_waits_a_moment_for_the_next_unit_of_a_stream_due_sooner(tmp_path: Path) -> None:
    """Issue 32: a run, once begun, holds the thread to its end. A stream whose unit has just
    ended has its next on the way from the event loop (4-7 ms); a job due later than that
    stream's audio runs out waits that moment for it, so the sooner one goes first. A job
    due sooner does not wait, and a next unit that does not come is waited for no longer."""
    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, ToyKind()))
    wait = 1.0  # the module's is 30 ms: the order must hold on a loaded box
    worker = InferenceWorker(registry, lambda callback: callback(), host=registry.host, next_unit_wait_s=wait)
    voice = registry.get("toy/a")
    order: list[str] = []
    done = {name: threading.Event() for name in ("a", "a2", "b", "c", "d")}

    def job(name: str, in_hand_s: float) -> Job:
        j = Job(name.rstrip("2"), "hello", voice, "en", 1.0, time.monotonic() + in_hand_s)
        j.sink = lambda job, event: (order.append(name), done[name].set()) if type(event).__name__ == "JobDone" else None
        return j

    worker.start()
    try:
        worker.submit(job("a", 1.0))  # its listener holds 1 s of audio
        assert done["a"].wait(10)
        worker.submit(job("b", 5.0))  # due later than a's audio runs out: it waits for a's next
        time.sleep(0.2)
        assert not done["b"].is_set(), "b began while a's next unit was on its way"
        worker.submit(job("a2", 1.0))
        assert done["a2"].wait(10) and done["b"].wait(10)
        assert order == ["a", "a2", "b"]
        # a's next unit does not come (its text ended, or its client went): c waits no longer.
        time.sleep(wait)
        worker.submit(job("a", 1.0))
        assert done["a"].wait(10)
        started = time.monotonic()
        worker.submit(job("c", 5.0))
        assert done["c"].wait(10) and time.monotonic() - started < wait + 0.5
        # A job due before a's audio runs out goes at once.
        time.sleep(wait)
        done["a"].clear()
        worker.submit(job("a", 1.0))
        assert done["a"].wait(10)
        started = time.monotonic()
        worker.submit(job("d", 0.0))
        assert done["d"].wait(10) and time.monotonic() - started < wait / 2
    finally:
        worker.stop()
        if registry.host is not None:
            registry.host.stop()


class PacedToy(ToyEngine):
    """A toy whose runs are paced (as Kokoro's are): it keeps the budgets it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.budgets: list[float | None] = []

    def limit_run_compute(self, seconds: float | None) -> None:
        self.budgets.append(seconds)


def test_a_run_leaves_time_for_the_next_unit_of_a_stream_between_units(tmp_path: Path) -> None:
    """Issue 32: a run begun while another stream is between two units (its next on the
    way from the event loop) is paced as if that stream were there: it may take no more
    than leaves that stream's next first run in time. Paced as if it were not, a run of
    0.9 s began with 1.1 s of the other's audio in hand, and that stream's second sentence
    came 0.27 s after its listener ran out (four Mandarin listeners at once)."""
    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, ToyKind()))
    engine = PacedToy()
    registry.engines["toy"] = engine
    worker = InferenceWorker(registry, lambda callback: callback(), host=registry.host, next_unit_wait_s=0.0)
    voice = registry.get("toy/a")
    done = {name: threading.Event() for name in ("a", "b")}

    def job(name: str, in_hand_s: float) -> Job:
        j = Job(name, "hello", voice, "en", 1.0, time.monotonic() + in_hand_s)
        j.sink = lambda job, event: done[name].set() if type(event).__name__ == "JobDone" else None
        return j

    worker.start()
    try:
        worker.submit(job("a", 1.0))  # a's listener holds 1.1 s once its unit is made
        assert done["a"].wait(10)
        engine.budgets.clear()
        worker.submit(job("b", 5.0))  # b holds 5 s: alone, its run could take nearly that
        assert done["b"].wait(10)
        assert engine.budgets and engine.budgets[0] is not None and engine.budgets[0] < 1.1, engine.budgets
    finally:
        worker.stop()
        if registry.host is not None:
            registry.host.stop()


class SlowToy(ToyEngine):
    """A toy whose unit takes a while: three windows of 40 ms each."""

    def synthesize(self, text: str, voice: VoiceInfo, lang: str, speed: float, lead_s: float = 0.0) -> Iterator[np.ndarray]:
        for _ in range(3):
            time.sleep(0.04)
            yield np.zeros(1600, dtype=np.float32)


def test_a_new_stream_is_counted_at_the_turn_it_holds_the_thread_for(tmp_path: Path) -> None:
    """Issue 32: a new stream of an engine that streams inside a unit (Piper's windows)
    holds the thread until it has the audio to let others go, not for its first window
    alone; a stream deciding whether it may yield to newcomers counts each at that turn,
    as measured. Counted at their first windows, seven Piper newcomers took 3.5 times
    what the stream that let them go had reckoned, and it ran out before its turn."""
    from rtts.synthesis.inference import _Entry

    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, ToyKind()))
    registry.engines["toy"] = SlowToy()
    worker = InferenceWorker(registry, lambda callback: callback(), host=registry.host)
    voice = registry.get("toy/a")
    done = threading.Event()
    opening = Job("a", "hello", voice, "en", 1.0, time.monotonic(), opens=True)
    opening.sink = lambda job, event: done.set() if type(event).__name__ == "JobDone" else None
    newcomer = _Entry(0.0, 0, Job("b", "hello", voice, "en", 1.0, 0.0, opens=True))
    next_unit = _Entry(0.0, 0, Job("b", "hello", voice, "en", 1.0, 0.0))
    first_window = worker._turn_cost(newcomer)  # the kind's prior for its first window
    assert first_window < 0.01
    worker.start()
    try:
        worker.submit(opening)  # alone: it holds the thread for its whole unit, 0.12 s
        assert done.wait(10)
    finally:
        worker.stop()
        if registry.host is not None:
            registry.host.stop()
    assert worker.opening_turn_s["toy"] >= 0.1
    assert worker._turn_cost(newcomer) == worker.opening_turn_s["toy"]
    # A stream's later unit: its first window (learned from the one that ran: a third of it).
    assert worker._turn_cost(next_unit) < worker._turn_cost(newcomer)


class LongToy(ToyEngine):
    """A toy whose unit makes 0.5 s of audio in about 20 ms."""

    def synthesize(self, text: str, voice: VoiceInfo, lang: str, speed: float, lead_s: float = 0.0) -> Iterator[np.ndarray]:
        time.sleep(0.02)
        yield np.zeros(8000, dtype=np.float32)


def test_opening_units_teach_their_own_cost_and_a_held_back_stream_is_told_by_it(tmp_path: Path) -> None:
    """Issue 32: an utterance's opening unit is made in short runs (the quick start, then
    runs cut to share the thread with the streams let in beside it), dearer a second of
    audio than the later ones. The worker learns it from opening units alone
    (``opening_rtf``) and tells a stream waiting for room the opening units ahead of it, and
    its own, at it: never below what the RTF says; a later unit at the RTF."""
    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, ToyKind()))
    registry.engines["toy"] = LongToy()
    voice = registry.get("toy/a")
    worker = InferenceWorker(registry, lambda callback: callback(), host=registry.host)
    done = threading.Event()
    later = Job("a", "hello", voice, "en", 1.0, 0.0)
    later.sink = lambda job, event: done.set() if type(event).__name__ == "JobDone" else None
    opening = Job("b", "hello", voice, "en", 1.0, 0.0, opens=True)
    worker.start()
    try:
        worker.submit(later)
        assert done.wait(10)
        assert "toy:en" in worker.lang_rtf and worker.opening_rtf == {}  # a later unit teaches the RTF alone
        assert worker._told_cost(opening) == worker._cost(opening)  # nothing learned of openings yet
        done.clear()
        opening.sink = later.sink
        worker.submit(opening)
        assert done.wait(10)
        assert set(worker.opening_rtf) == {"toy:en"}
    finally:
        worker.stop()
        if registry.host is not None:
            registry.host.stop()
    worker.opening_rtf["toy:en"] = 2 * worker.lang_rtf["toy:en"]
    assert worker._told_cost(opening) == pytest.approx(2 * worker._cost(opening))
    assert worker._told_cost(later) == worker._cost(later)
    assert worker._as_waiting(opening, 1.0).compute_s == pytest.approx(worker._told_cost(opening) + worker._rest_s(opening))
    worker.opening_rtf["toy:en"] = worker.lang_rtf["toy:en"] / 2
    assert worker._told_cost(opening) == worker._cost(opening)
