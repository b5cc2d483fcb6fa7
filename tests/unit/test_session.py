"""Per-connection logic without sockets or models.

The inference thread is played by hand: the test answers each submitted job with
audio it makes up. The same behaviours run end to end with real voices in
tests/live/test_server.py.
"""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from rtts import protocol
from rtts.config import Config
from rtts.engines.base import VoiceInfo
from rtts.sound import audio
from rtts.sound.track import RESAMPLER_HOLD_S
from rtts.speech.effects import Close, Drop, Send, Submit
from rtts.speech.session import Session
from rtts.synthesis.jobs import Job, JobAudio, JobDone, JobFailed
from tests.catalogs import FixedCatalog

VOICES = {
    "piper/a": VoiceInfo("piper/a", "A", ("en",), "piper", 22050, "piper/a"),
    "kokoro/b": VoiceInfo("kokoro/b", "B", ("en",), "kokoro", 24000, "kokoro", "b"),
}


def Catalog() -> FixedCatalog:
    return FixedCatalog(VOICES, "piper/a", loaded=["piper/a"])


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


# The shared clock a session's pongs read (Unix seconds): the test clock, far from time.time().
UNIX0 = 1_800_000_000.0


def make(**overrides) -> tuple[Session, Clock]:
    clock = Clock()
    cfg = Config(cache_dir="/tmp/rtts-test", models_dir="/tmp/rtts-test", **overrides)
    return Session("s1", cfg, Catalog(), clock, wall=lambda: UNIX0 + clock.t), clock


def send(session: Session, **msg) -> list:
    return session.receive(msgpack.packb(msg))


def sent(effects, kind=None):
    out = [e.message for e in effects if isinstance(e, Send)]
    return [m for m in out if kind is None or isinstance(m, kind)]


def submits(effects):
    return [e.job for e in effects if isinstance(e, Submit)]


def errors(effects):
    return [m.code for m in sent(effects, protocol.Error)]


def tone(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def run_job(session: Session, job, seconds=0.5, pieces=1):
    effects = []
    if job.pause_ms:  # what the worker answers a pause job with
        for chunk in audio.silence_chunks(job.pause_ms, job.voice.native_rate, 100):
            effects += session.job_event(job, JobAudio(chunk))
        return effects + session.job_event(job, JobDone(0.0))
    for _ in range(pieces):
        effects += session.job_event(job, JobAudio(tone(seconds / pieces, job.voice.native_rate)))
    effects += session.job_event(job, JobDone(seconds * 0.1))
    return effects


def speak_all(session: Session, first_effects) -> list:
    """Answer every job until nothing more is submitted; returns all effects."""
    effects = list(first_effects)
    queue = submits(first_effects)
    while queue:
        job = queue.pop(0)
        more = run_job(session, job)
        effects += more
        queue += submits(more)
    return effects


def test_ready_on_open_lists_voices_and_limits():
    session, _ = make()
    (ready,) = sent(session.open())
    assert isinstance(ready, protocol.Ready)
    assert ready.v == 1 and ready.sample_rate == 24000 and ready.format == "pcm16" and ready.frame_ms == 20
    assert [v["id"] for v in ready.voices] == list(VOICES)
    assert ready.default_voice == "piper/a" and ready.loaded == ["piper/a"]
    assert ready.limits["max_text_chars"] == 5000


def test_speak_streams_exact_frames_marks_and_end():
    session, clock = make()
    effects = send(session, type="speak", id="u1", text="Hello there, friend. This is a second sentence. And a third one!")
    clock.t += 0.05
    effects = speak_all(session, effects)
    starts = sent(effects, protocol.Start)
    assert starts == [protocol.Start("u1", "piper/a", 24000, "pcm16", expected_wait_ms=0, expected_audio_ms=0)]
    frames = sent(effects, protocol.Audio)
    assert [f.seq for f in frames] == list(range(len(frames)))
    assert all(len(f.data) == 480 * 2 for f in frames[:-1])  # 20 ms at 24 kHz, int16
    assert 0 < len(frames[-1].data) <= 480 * 2
    assert [f.pts for f in frames] == [i * 480 for i in range(len(frames))]
    marks = sent(effects, protocol.Mark)
    assert len(marks) >= 3 and marks[0].pts == 0 and marks[0].kind == "sentence"
    assert [m.pts for m in marks] == sorted(m.pts for m in marks)
    assert " ".join(m.text for m in marks).split() == "Hello there, friend. This is a second sentence. And a third one!".split()
    (end,) = sent(effects, protocol.End)
    assert end.reason == "done" and effects.index(Send(end)) == len(effects) - 1
    assert end.stats["ttfa_ms"] == pytest.approx(50.0)
    total = sum(len(f.data) for f in frames) // 2
    assert end.stats["audio_ms"] == pytest.approx(total / 24, rel=0.02)
    assert end.stats["rtf"] == pytest.approx(3 * 0.05 / (total / 24000), rel=0.05)  # pauses count as audio


def test_first_unit_is_short():
    session, _ = make()
    text = "When the train arrives at the central station, please wait behind the yellow line until it stops."
    (job,) = submits(send(session, type="speak", id="u", text=text))
    assert len(job.text) < len(text) and text.startswith(job.text.rstrip(",")[:10])


@pytest.mark.parametrize("fmt, width", [("pcm16", 2), ("f32", 4), ("mulaw", 1)])
@pytest.mark.parametrize("rate, ms", [(8000, 10), (16000, 20), (22050, 40), (44100, 10), (48000, 200)])
def test_formats_rates_and_frame_sizes(fmt, width, rate, ms):
    session, _ = make()
    (ready,) = sent(send(session, type="hello", v=1, sample_rate=rate, format=fmt, frame_ms=ms))
    assert (ready.sample_rate, ready.format, ready.frame_ms) == (rate, fmt, ms)
    effects = speak_all(session, send(session, type="speak", id="x", text="One. Two."))
    frames = sent(effects, protocol.Audio)
    n = rate * ms // 1000
    assert all(len(f.data) == n * width for f in frames[:-1])
    decoded = np.concatenate([audio.decode(f.data, fmt) for f in frames])
    # Two half-second units at the voice's rate, resampled, plus one pause between.
    assert len(decoded) / rate == pytest.approx(1.0 + audio_pause_s(), abs=0.03)


def audio_pause_s() -> float:
    from rtts.text.split import Unit, pause_ms

    return pause_ms(Unit("One.", "sentence")) / 1000


def test_frame_size_that_is_not_whole_samples_is_refused():
    session, _ = make()
    assert errors(send(session, type="hello", sample_rate=22050, frame_ms=10)) == ["bad_message"]


def test_utterances_of_a_connection_play_in_order():
    session, _ = make()
    a = submits(send(session, type="speak", id="a", text="First."))
    b = submits(send(session, type="speak", id="b", text="Second."))
    assert len(a) == 1 and b == []  # b waits for a
    effects = run_job(session, a[0])
    assert [m.id for m in sent(effects, protocol.End)] == ["a"]
    (job_b,) = submits(effects)
    assert job_b.utterance == "b"


def test_cancel_mid_utterance_stops_audio_and_drops_the_job():
    session, _ = make()
    (job,) = submits(send(session, type="speak", id="a", text="One sentence here. Another sentence there."))
    session.job_event(job, JobAudio(tone(0.1, 22050)))
    effects = send(session, type="cancel", id="a")
    assert [e.job for e in effects if isinstance(e, Drop)] == [job] and job.cancelled
    (end,) = sent(effects, protocol.End)
    assert end.reason == "cancelled"
    # Whatever the inference thread still reports for it is ignored.
    assert session.job_event(job, JobAudio(tone(0.1, 22050))) == []
    assert session.job_event(job, JobDone(0.01)) == []
    assert errors(send(session, type="cancel", id="a")) == ["unknown_id"]


def test_interrupt_cancels_everything_queued_first():
    session, _ = make()
    (job_a,) = submits(send(session, type="speak", id="a", text="Long story."))
    send(session, type="speak", id="b", text="Queued.")
    effects = send(session, type="speak", id="c", text="Alert!", interrupt=True)
    assert [(m.id, m.reason) for m in sent(effects, protocol.End)] == [("a", "cancelled"), ("b", "cancelled")]
    assert [j.utterance for j in submits(effects)] == ["c"] and job_a.cancelled


def test_cancel_without_id_cancels_all():
    session, _ = make()
    send(session, type="speak", id="a", text="A.")
    send(session, type="speak", id="b", text="B.")
    assert sorted(m.id for m in sent(send(session, type="cancel"), protocol.End)) == ["a", "b"]
    assert not session.utterances


def test_append_speaks_complete_clauses_before_flush():
    session, _ = make()
    assert submits(send(session, type="append", id="s", text="Hello wor")) == []
    (job,) = submits(send(session, type="append", id="s", text="ld, how are you today? I am"))
    assert job.text.startswith("Hello world")
    effects = run_job(session, job)
    effects += send(session, type="append", id="s", text=" fine")
    queued = submits(effects)
    while queued:
        effects = run_job(session, queued.pop(0))
        queued += submits(effects)
    assert not sent(effects, protocol.End)  # not flushed yet
    effects = send(session, type="flush", id="s")
    spoken = []
    queued = submits(effects)
    while queued:
        j = queued.pop(0)
        spoken.append(j.text)
        effects = run_job(session, j)
        queued += submits(effects)
    assert " ".join(spoken).split()[-2:] == ["am", "fine"]
    assert sent(effects, protocol.End)[0].reason == "done"


def test_flush_of_unknown_id_and_append_after_speak():
    session, _ = make()
    assert errors(send(session, type="flush", id="nope")) == ["unknown_id"]
    send(session, type="speak", id="a", text="Hi.")
    assert errors(send(session, type="append", id="a", text="more")) == ["bad_message"]


def test_limits_and_bad_requests_keep_the_session_usable():
    session, _ = make(max_text_chars=20, max_utterances=2)
    assert errors(send(session, type="speak", id="a", text="x" * 21)) == ["text_too_long"]
    assert errors(send(session, type="speak", id="a", text="Hi.", voice="nope/nope")) == ["unknown_voice"]
    assert errors(send(session, type="speak", id="a", text="Hi.", lang="xx")) == ["unsupported_language"]
    assert errors(send(session, type="speak", id="a", text="   ")) == ["bad_message"]
    assert errors(session.receive("text frame")) == ["bad_frame"]
    assert errors(session.receive(b"\xc1")) == ["bad_frame"]
    assert errors(send(session, type="yell")) == ["unknown_type"]
    assert submits(send(session, type="speak", id="a", text="Hi."))
    assert errors(send(session, type="speak", id="a", text="Again.")) == ["duplicate_id"]
    send(session, type="speak", id="b", text="B.")
    assert errors(send(session, type="speak", id="c", text="C.")) == ["busy"]
    assert errors(send(session, type="append", id="a2", text="x" * 15)) == ["busy"]
    assert sent(send(session, type="ping", t=7)) == [protocol.Pong(7, server_time=UNIX0 + 100.0)]


def test_append_total_length_is_limited():
    session, _ = make(max_text_chars=20)
    send(session, type="append", id="a", text="x" * 15)
    assert errors(send(session, type="append", id="a", text="y" * 6)) == ["text_too_long"]


def test_token_required_before_anything_else():
    session, _ = make(token="s3cret")
    assert session.open() == []
    effects = send(session, type="speak", id="a", text="Hi.")
    assert errors(effects) == ["unauthorized"] and any(isinstance(e, Close) and e.code == 1008 for e in effects)
    session, _ = make(token="s3cret")
    assert errors(send(session, type="hello", token="wrong")) == ["unauthorized"]
    session, _ = make(token="s3cret")
    assert isinstance(sent(send(session, type="hello", token="s3cret"))[0], protocol.Ready)
    assert submits(send(session, type="speak", id="a", text="Hi."))


def test_engine_failure_ends_the_utterance_and_the_next_one_runs():
    session, _ = make()
    (job,) = submits(send(session, type="speak", id="a", text="A."))
    send(session, type="speak", id="b", text="B.")
    effects = session.job_event(job, JobFailed("engine_unavailable", "model broken"))
    assert errors(effects) == ["engine_unavailable"]
    assert sent(effects, protocol.End)[0].reason == "error"
    assert [j.utterance for j in submits(effects)] == ["b"]


def test_close_drops_in_flight_jobs():
    session, _ = make()
    (job,) = submits(send(session, type="speak", id="a", text="A."))
    assert [e.job for e in session.close() if isinstance(e, Drop)] == [job]


def test_deadline_favours_a_stream_about_to_starve():
    session, clock = make()
    (job,) = submits(send(session, type="speak", id="a", text="First sentence here. Second sentence there."))
    assert job.deadline == clock.t  # nothing buffered: urgent
    effects = run_job(session, job, seconds=2.0)
    (nxt,) = submits(effects)
    # The client now holds ~2 s of audio, so the next unit can wait that long.
    assert nxt.deadline == pytest.approx(clock.t + 2.0, abs=0.05)


def test_hello_changes_defaults_for_later_utterances():
    session, _ = make()
    send(session, type="hello", voice="kokoro/b", speed=1.5)
    (job,) = submits(send(session, type="speak", id="a", text="Hi."))
    assert job.voice.id == "kokoro/b" and job.speed == 1.5
    assert errors(send(session, type="hello", voice="missing")) == ["unknown_voice"]


# ---------------------------------------------------------------- languages


MIXED_VOICES = {
    "piper/a": VoiceInfo("piper/a", "A", ("en",), "piper", 22050, "piper/a"),
    "kokoro/j": VoiceInfo("kokoro/j", "J", ("ja", "en", "zh"), "kokoro", 24000, "kokoro", "j"),
    "kokoro/z": VoiceInfo("kokoro/z", "Z", ("zh", "en", "ja"), "kokoro", 24000, "kokoro", "z"),
}


def MixedCatalog(**kw) -> FixedCatalog:  # type: ignore[no-untyped-def]
    return FixedCatalog(MIXED_VOICES, "piper/a", **kw)


def make_mixed(*, max_pause: float = 60.0, max_audio: float = 600.0, **catalog) -> Session:  # type: ignore[no-untyped-def]
    cfg = Config(cache_dir="/tmp/rtts-test", models_dir="/tmp/rtts-test", max_pause=max_pause, max_audio=max_audio)
    return Session("s1", cfg, MixedCatalog(**catalog), Clock())


def speak_all_jobs(session: Session, first_effects, seconds=0.3):
    effects, jobs = list(first_effects), []
    queue = submits(first_effects)
    while queue:
        job = queue.pop(0)
        jobs.append(job)
        more = run_job(session, job, seconds=seconds, pieces=3)
        effects += more
        queue += submits(more)
    return effects, jobs


@pytest.mark.parametrize("rate", [16000, 22050, 24000, 48000])
def test_mixed_text_goes_to_each_languages_voice_with_seamless_audio(rate):
    session = make_mixed(lang_voices=(("zh", "kokoro/z"), ("ja", "kokoro/j")))
    sent(send(session, type="hello", v=1, sample_rate=rate, frame_ms=20 if rate != 22050 else 40))
    text = "Hello，欢迎来到杭州！今日は東京です。"
    effects, jobs = speak_all_jobs(session, send(session, type="speak", id="m", text=text))
    assert [(j.voice.id, j.lang, j.text) for j in jobs] == [
        ("piper/a", "en", "Hello，"),
        ("kokoro/z", "zh", "欢迎来到杭州！"),
        ("kokoro/j", "ja", "今日は東京です。"),
    ]
    frames = sent(effects, protocol.Audio)
    n = audio.frame_samples(rate, 20 if rate != 22050 else 40)
    assert [f.seq for f in frames] == list(range(len(frames)))
    assert [f.pts for f in frames] == [i * n for i in range(len(frames))]
    assert all(len(f.data) == n * 2 for f in frames[:-1])
    total = sum(len(f.data) for f in frames) // 2
    # Two units ("Hello，欢迎来到杭州！" and the Japanese sentence): three 0.3 s jobs at their
    # native rates, resampled, with one sentence pause, and no gap where the rate changes.
    marks = sent(effects, protocol.Mark)
    assert [(m.voice, m.lang, m.kind) for m in marks] == [
        ("piper/a", "en", "sentence"), ("kokoro/z", "zh", "segment"), ("kokoro/j", "ja", "sentence")
    ]
    assert [m.pts / rate for m in marks] == pytest.approx([0, 0.3, 0.6 + 0.25], abs=0.002)
    assert total / rate == pytest.approx(0.9 + 0.25, abs=0.002)
    (start,) = sent(effects, protocol.Start)
    assert start.voice == "piper/a"
    (end,) = sent(effects, protocol.End)
    assert end.reason == "done" and end.stats["audio_ms"] == pytest.approx(1000 * total / rate, abs=25)


# Per engine: (compute seconds before its first audio, seconds of audio) per character, as a
# 2-core box measures them: Piper's "Hello，" is 0.4 s of audio, made at once; Kokoro's
# Mandarin takes ~0.1 s a character before its first audio.
SLOW_KOKORO = {"piper": (0.0025, 0.065), "kokoro": (0.1, 0.2)}


def test_a_quick_opening_part_is_kept_back_until_the_slower_voice_after_it_has_audio():
    # Sent at once, "Hello，" (0.39 s) would run out 0.3 s before Kokoro's "欢迎来到杭州！"
    # (0.7 s of compute) began: an underrun at the change of voice (issue 32).
    session = make_mixed(lang_voices=(("zh", "kokoro/z"),), first_audio=SLOW_KOKORO)
    (job1,) = submits(send(session, type="speak", id="m", text="Hello，欢迎来到杭州！"))
    effects = run_job(session, job1, seconds=0.4, pieces=2)
    assert not sent(effects, protocol.Audio) and not sent(effects, protocol.Mark)
    (job2,) = submits(effects)
    assert (job2.voice.id, job2.deadline) == ("kokoro/z", 100.0)  # the client holds nothing: its quick start
    first = session.job_event(job2, JobAudio(tone(0.3, 24000)))
    messages = sent(first)
    kinds = [type(m).__name__ for m in messages]
    # Hello's mark and its frames first, then Kokoro's, in order, in one go.
    assert kinds[0] == "Mark" and messages[0].voice == "piper/a"
    second_mark = kinds.index("Mark", 1)
    assert messages[second_mark].voice == "kokoro/z" and set(kinds[1:second_mark]) == {"Audio"}
    frames = sent(first, protocol.Audio)
    assert [f.seq for f in frames] == list(range(len(frames)))
    effects = session.job_event(job2, JobDone(0.7))
    (end,) = sent(effects, protocol.End)
    assert end.reason == "done"


def test_a_short_sentence_before_the_slower_voices_is_kept_back_too():
    # "Hi." is a unit of its own: its 0.2 s and the sentence pause (0.25 s) still run out
    # before Kokoro's "欢迎光临，…" begins.
    session = make_mixed(lang_voices=(("zh", "kokoro/z"),), first_audio=SLOW_KOKORO)
    (job1,) = submits(send(session, type="speak", id="m", text="Hi. 欢迎光临，请出示您的车票。"))
    effects = run_job(session, job1, seconds=0.2)
    assert not sent(effects, protocol.Audio)
    (job2,) = submits(effects)
    assert job2.voice.id == "kokoro/z"
    first = sent(session.job_event(job2, JobAudio(tone(0.3, 24000))))
    assert [type(m).__name__ for m in first[:2]] == ["Mark", "Audio"] and first[0].voice == "piper/a"


def test_an_opening_part_that_outlasts_the_next_voices_start_goes_out_at_once():
    # "The next stop is" (1.0 s) covers Kokoro's start: nothing is kept back, and a voice
    # that starts at once keeps "Hello，" as it was.
    for text, first_audio in (("The next stop is 上海虹桥站。", SLOW_KOKORO), ("Hello，欢迎来到杭州！", None)):
        session = make_mixed(lang_voices=(("zh", "kokoro/z"),), first_audio=first_audio)
        (job1,) = submits(send(session, type="speak", id="m", text=text))
        effects = session.job_event(job1, JobAudio(tone(0.4, 22050)))
        assert sent(effects, protocol.Audio) and sent(effects, protocol.Mark), text


def test_a_part_before_another_voices_tells_the_thread_what_that_voices_first_run_costs():
    # The English job carries Kokoro's first run of "上海虹桥站。" (0.1 s a character here,
    # the catalog's estimate): the thread leaves room for it beside other streams when the
    # English audio runs out (InferenceWorker._run_budget). One voice throughout: nothing.
    session = make_mixed(lang_voices=(("zh", "kokoro/z"),), first_audio=SLOW_KOKORO)
    (job1,) = submits(send(session, type="speak", id="m", text="The next stop is 上海虹桥站。"))
    assert job1.voice.id == "piper/a" and job1.next_first_s == pytest.approx(0.1 * len("上海虹桥站。"))
    effects = session.job_event(job1, JobAudio(tone(1.0, 22050)))
    (job2,) = submits(session.job_event(job1, JobDone(0.01)) + effects)
    assert job2.voice.id == "kokoro/z" and job2.next_first_s == 0.0  # nothing after it
    # Across a sentence end too: "Hi." is a unit of its own before the Mandarin one.
    session = make_mixed(lang_voices=(("zh", "kokoro/z"),), first_audio=SLOW_KOKORO)
    (job,) = submits(send(session, type="speak", id="h", text="Hi. 欢迎光临，请出示您的车票。"))
    assert job.voice.id == "piper/a" and job.next_first_s == pytest.approx(0.1 * len("欢迎光临，请出示您的车票。"))
    session = make_mixed(lang_voices=(("zh", "kokoro/z"),), first_audio=SLOW_KOKORO)
    (job,) = submits(send(session, type="speak", id="e", text="The next stop is Boston. Mind the gap."))
    assert job.next_first_s == 0.0


def test_what_was_kept_back_is_sent_before_a_failure_and_dropped_with_a_cancel():
    session = make_mixed(lang_voices=(("zh", "kokoro/z"),), first_audio=SLOW_KOKORO)
    (job1,) = submits(send(session, type="speak", id="m", text="Hello，欢迎来到杭州！"))
    (job2,) = submits(run_job(session, job1, seconds=0.4))
    effects = session.job_event(job2, JobFailed("engine_unavailable", "gone"))
    kinds = [type(m).__name__ for m in sent(effects)]
    assert kinds[0] == "Mark" and "Audio" in kinds and kinds[-2:] == ["Error", "End"]

    session = make_mixed(lang_voices=(("zh", "kokoro/z"),), first_audio=SLOW_KOKORO)
    (job1,) = submits(send(session, type="speak", id="m", text="Hello，欢迎来到杭州！"))
    run_job(session, job1, seconds=0.4)
    effects = send(session, type="cancel", id="m")
    assert [type(m).__name__ for m in sent(effects)] == ["End"]


def test_segments_within_a_unit_are_marked_and_keep_one_voice_when_it_speaks_both():
    session = make_mixed(first_unit_chars={"kokoro": 40})  # the whole sentence is one unit
    effects, jobs = speak_all_jobs(session, send(session, type="speak", id="m", text="请打开 Bluetooth 设置。", voice="kokoro/z"))
    assert [(j.voice.id, j.lang) for j in jobs] == [("kokoro/z", "zh"), ("kokoro/z", "en"), ("kokoro/z", "zh")]
    marks = sent(effects, protocol.Mark)
    assert [m.kind for m in marks] == ["sentence", "segment", "segment"]
    assert [m.text for m in marks] == ["请打开", "Bluetooth", "设置。"]


@pytest.mark.parametrize("rate, frame_ms", [(22050, 200), (16000, 100), (24000, 20)])
def test_the_thread_counts_the_audio_a_client_holds_in_the_frames_it_is_sent(rate, frame_ms):
    # The worker moves a job's deadline by what each chunk adds to the client's audio
    # (Job.framed). The session sends whole frames, so a chunk short of a frame adds nothing
    # until the next completes it, and the part frame carries over to the utterance's next
    # job: an HTTP route's 200 ms frames would otherwise be counted up to 0.2 s early.
    session, _ = make()
    sent(send(session, type="hello", v=1, sample_rate=rate, format="pcm16", frame_ms=frame_ms))
    jobs = submits(send(session, type="speak", id="u", text="One sentence here. And another one after it."))
    rng = np.random.default_rng(frame_ms)
    done = 0
    while jobs:
        job = jobs.pop()
        framed_s = sent_s = 0.0  # each job's deadline starts from the frames sent (``_play_until``)
        assert job.frame_s == frame_ms / 1000
        for seconds in rng.uniform(0.01, 0.35, 8):
            chunk = tone(seconds, job.voice.native_rate)
            framed_s += job.framed(len(chunk) / job.voice.native_rate)
            sent_s += sum(len(m.data) / 2 / rate for m in sent(session.job_event(job, JobAudio(chunk)), protocol.Audio))
            # Never more than was sent; short of it by at most a frame, the resampler's hold
            # (where the rates differ) and the pause the second sentence opens with (not counted).
            short = frame_ms / 1000 + (RESAMPLER_HOLD_S if rate != job.voice.native_rate else 0.0) + 0.25 * done
            assert sent_s - short - 1e-6 <= framed_s <= sent_s + 1e-6
        jobs += submits(session.job_event(job, JobDone(0.01)))
        done += 1
    assert done >= 2  # the part frame crossed from one job to the next
    assert Job("u", "hi", VOICES["piper/a"], "en", 1.0, 0.0).framed(0.123) == 0.123  # frames unknown: all of it


def test_only_an_utterances_first_job_opens_it():
    # The worker does not let the first job's audio wait behind what the client still plays.
    session = make_mixed()
    text = "Hello there, this first sentence is long enough to be cut. And a second one."
    _, jobs = speak_all_jobs(session, send(session, type="speak", id="a", text=text))
    _, again = speak_all_jobs(session, send(session, type="speak", id="b", text=text))
    assert len(jobs) >= 3
    assert [j.opens for j in jobs] == [True] + [False] * (len(jobs) - 1)
    assert [j.opens for j in again] == [True] + [False] * (len(again) - 1)


def test_lang_hint_decides_han_and_default_voices_come_from_the_catalog():
    session = make_mixed(lang_voices=())
    _, jobs = speak_all_jobs(session, send(session, type="speak", id="a", text="東京駅", lang="ja"))
    assert [(j.voice.id, j.lang) for j in jobs] == [("kokoro/j", "ja")]
    _, jobs = speak_all_jobs(session, send(session, type="speak", id="b", text="東京駅"))
    assert [(j.voice.id, j.lang) for j in jobs] == [("kokoro/z", "zh")]


def test_unsupported_languages_are_refused_with_a_stable_code():
    session = make_mixed()
    for lang in ("ko", "yue", "zh-HK"):
        assert errors(send(session, type="speak", id="k", text="Hi.", lang=lang)) == ["unsupported_language"]
    assert errors(send(session, type="speak", id="k", text="안녕하세요. Hello.")) == ["unsupported_language"]
    # Streaming text learns of the language late: the utterance ends with an error, the session goes on.
    effects = send(session, type="append", id="s", text="Hello there. ")
    effects += speak_all_jobs(session, effects)[0]
    effects += send(session, type="append", id="s", text="안녕하세요. ")
    effects += send(session, type="flush", id="s")
    assert "unsupported_language" in errors(effects)
    assert sent(effects, protocol.End)[-1].reason == "error"
    effects, jobs = speak_all_jobs(session, send(session, type="speak", id="ok", text="Fine."))
    assert sent(effects, protocol.End)[-1].reason == "done"


def test_korean_is_refused_in_one_wording_whether_named_or_written():
    """Issue 30: ``lang: "ko"`` and Hangul text were refused with two wordings, the
    languages offered in two orders."""
    session = make_mixed()
    named = sent(send(session, type="speak", id="k", text="Hi.", lang="ko"), protocol.Error)[0].message
    written = sent(send(session, type="speak", id="k", text="안녕하세요."), protocol.Error)[0].message
    assert named == written == "'ko' is not offered here; text is read in en, zh, ja", (named, written)


def test_unknown_voice_names_where_this_client_can_look():
    """Issue 30: every route said "see ready.voices", which only a WebSocket client has."""
    cfg = Config(cache_dir="/tmp/rtts-test", models_dir="/tmp/rtts-test")
    for voices_at in ("ready.voices", "GET /v1/audio/voices"):
        session = Session("s1", cfg, MixedCatalog(), Clock(), voices_at=voices_at)
        [error] = sent(send(session, type="speak", id="a", text="Hi.", voice="nope/nope"), protocol.Error)
        assert error.message == f"no voice 'nope/nope'; see {voices_at}"


def test_break_markup_adds_exact_silence_and_unknown_tags_are_ignored():
    session = make_mixed()
    text = '<speak>One <break time="500ms"/> two <blink>three</blink></speak>'
    effects, jobs = speak_all_jobs(session, send(session, type="speak", id="b", text=text))
    assert [(j.text, j.pause_ms) for j in jobs] == [("One", 0), ("", 500), ("two three", 0)]
    frames = sent(effects, protocol.Audio)
    total = sum(len(f.data) for f in frames) // 2
    assert total / 24000 == pytest.approx(0.6 + 0.5, abs=0.02)
    marks = sent(effects, protocol.Mark)
    assert marks[1].pts / 24000 == pytest.approx(0.3 + 0.5, abs=0.01)


def test_break_markup_split_across_appends_and_spelled_spans():
    session = make_mixed()
    effects = send(session, type="append", id="a", text="Code <say-as interpret-as='char")
    effects += send(session, type="append", id="a", text="acters'>AB1</say-as> now <bre")
    effects += send(session, type="append", id="a", text='ak time="1s"/>done.')
    effects += send(session, type="flush", id="a")
    effects, jobs = speak_all_jobs(session, effects)
    assert [(j.text, j.pause_ms) for j in jobs] == [("Code eigh B 1 now", 0), ("", 1000), ("done.", 0)]
    assert sent(effects, protocol.End)[-1].reason == "done"


def test_lexicon_reaches_the_engine_text_but_not_the_marks():
    from rtts.text.lexicon import Lexicon

    cfg = Config(cache_dir="/tmp/rtts-test", models_dir="/tmp/rtts-test")
    session = Session("s", cfg, MixedCatalog(), Clock(), lexicon=Lexicon.parse("Nguyen = Win\nXiaomi = /ʃaʊmi/"))
    effects, jobs = speak_all_jobs(session, send(session, type="speak", id="l", text="Nguyen likes Xiaomi."))
    assert jobs[0].text == "Win likes \ue002ʃaʊmi\ue003."
    assert sent(effects, protocol.Mark)[0].text == "Nguyen likes Xiaomi."


def test_a_message_made_in_process_is_handled_like_the_same_frame():
    # rtts say and /tts hand the session message objects; nothing is encoded to be decoded again.
    wire, _ = make()
    local, _ = make()

    def shape(effects):  # jobs are numbered per process
        return [(type(e).__name__, getattr(e, "message", None), getattr(getattr(e, "job", None), "text", None)) for e in effects]

    for msg in (protocol.Hello(sample_rate=16000), protocol.Speak(id="a", text="Hello there.")):
        assert shape(local.handle(msg)) == shape(wire.receive(protocol.encode(msg)))
    bad = protocol.Speak(id="b", text="x", speed=5.0)
    assert local.handle(bad) == wire.receive(protocol.encode(bad))
    assert errors(local.handle(bad)) == ["bad_message"]


def test_breaks_are_capped_in_total_and_sent_as_short_pause_jobs():
    """Issue 13, bug 2: 277 ten-second breaks were summed into one 46-minute block of
    silence, built at once on the event loop. The total is capped (limits.max_pause_ms)
    and the silence goes out as pause jobs of at most 2 s, framed chunk by chunk."""
    session = make_mixed(max_pause=30.0)
    (ready,) = sent(session.open())
    assert ready.limits["max_pause_ms"] == 30000 and ready.limits["max_audio_ms"] == 600000
    text = "<break time='10s'/>" * 260 + "Hi."  # 4,943 characters
    effects, jobs = speak_all_jobs(session, send(session, type="speak", id="b", text=text))
    pauses = [j.pause_ms for j in jobs if j.pause_ms]
    assert sum(pauses) == 30000 and max(pauses) <= 2000
    assert [j.text for j in jobs if not j.pause_ms] == ["Hi."]
    total = sum(len(f.data) for f in sent(effects, protocol.Audio)) // 2
    assert total / 24000 == pytest.approx(30 + 0.3, abs=0.05)
    assert sent(effects, protocol.End)[-1].reason == "done"
    # One chunk of a pause job makes a handful of frames, not the whole pause.
    session2 = make_mixed()
    (job,) = submits(send(session2, type="speak", id="p", text="<break time='2s'/>x"))
    assert job.pause_ms == 2000
    assert len(sent(session2.job_event(job, JobAudio(np.zeros(2205, np.float32))), protocol.Audio)) <= 5


def test_an_utterance_that_passes_max_audio_ends_with_audio_too_long():
    session = make_mixed(max_audio=1.0, max_pause=1.0)
    effects = send(session, type="speak", id="long", text="One. Two. Three. Four. Five.")
    effects, jobs = speak_all_jobs(session, effects)
    assert errors(effects) == ["audio_too_long"]
    (end,) = sent(effects, protocol.End)
    assert end.reason == "error" and end.stats["audio_ms"] <= 1000
    assert any(isinstance(e, Drop) for e in effects)
    # The connection goes on.
    effects, _ = speak_all_jobs(session, send(session, type="speak", id="ok", text="Fine."))
    assert sent(effects, protocol.End)[-1].reason == "done"


def test_a_refused_append_is_not_counted():
    """Issue 13, bug 7: the refused text was added to the utterance's length before the check,
    so text that fits was refused afterwards."""
    session, _ = make(max_text_chars=100)
    send(session, type="append", id="a", text="x" * 60)
    assert errors(send(session, type="append", id="a", text="y" * 50)) == ["text_too_long"]
    assert errors(send(session, type="append", id="a", text="z" * 40)) == []


@pytest.mark.parametrize("text", ["...", "！？。，", "\u200b\u200c\u200d", "\u200e\u200f\u202a\u202c", " - * ~ "])
def test_text_that_says_nothing_is_bad_message(text):
    session, _ = make()
    assert errors(send(session, type="speak", id="q", text=text)) == ["bad_message"]
    assert not session.utterances
    # A pause alone is something: silence was asked for.
    assert errors(send(session, type="speak", id="p", text="<break time='300ms'/>")) == []


@pytest.mark.parametrize("hangul", ["\uffa1\uffa4", "\u3200\u3201", "\u3260\u3261", "\ua960\ua961", "\ud7b0\ud7b1", "\u3131"])
def test_every_form_of_hangul_is_refused(hangul):
    session = make_mixed()
    assert errors(send(session, type="speak", id="k", text=f"{hangul} Hello.")) == ["unsupported_language"]


def test_hello_checks_lang_and_an_empty_voice_is_no_voice():
    session, _ = make()
    assert errors(send(session, type="hello", v=1, lang="tlh")) == ["unsupported_language"]
    assert sent(send(session, type="hello", v=1, lang="ZH-cn"), protocol.Ready)
    assert session.lang == "zh"
    assert errors(send(session, type="speak", id="v", text="Hi.", voice="")) == ["unknown_voice"]
    assert errors(send(session, type="hello", v=1, voice="")) == ["unknown_voice"]


def test_anything_wrong_before_a_required_hello_closes_1008():
    for frame in (b"\xc1garbage", "a text frame", msgpack.packb({"type": "ping", "t": 1})):
        session, _ = make(token="secret")
        effects = session.receive(frame)
        assert [e.code for e in effects if isinstance(e, Close)] == [protocol.CloseCode.POLICY]
    session, _ = make(token="secret")
    assert not [e for e in send(session, type="hello", v=1, token="secret") if isinstance(e, Close)]
    # Once in, bad input is answered and the connection stays.
    assert not [e for e in session.receive(b"\xc1garbage") if isinstance(e, Close)]


@pytest.mark.parametrize("how", ["flag", "env", "file"])
def test_an_empty_token_is_refused_however_it_is_given(tmp_path, how):
    import argparse

    from rtts import config

    parser = argparse.ArgumentParser()
    config.add_flags(parser)
    (tmp_path / "token").write_text("\n")
    args = {"flag": ["--token", ""], "env": [], "file": ["--token-file", str(tmp_path / "token")]}[how]
    env = {"RTTS_TOKEN": ""} if how == "env" else {}
    with pytest.raises(ValueError, match="empty"):
        config.from_args(parser.parse_args(args), env)


@pytest.mark.parametrize("how", ["speak", "append"])
def test_chinese_with_no_voice_named_gets_the_mandarin_voices_short_first_unit(how):
    # The default voice is Piper (first unit 40); the Mandarin text goes to Kokoro (16), whose
    # first unit decides the time to first audio: it was the whole 24-character sentence.
    text = "各位旅客请注意，开往上海虹桥的列车现在开始检票。"
    named, unnamed = make_mixed(), make_mixed()
    if how == "speak":
        first_named = submits(send(named, type="speak", id="a", text=text, voice="kokoro/z"))
        first_unnamed = submits(send(unnamed, type="speak", id="a", text=text))
    else:
        first_named = submits(send(named, type="append", id="a", text=text, voice="kokoro/z") + send(named, type="flush", id="a"))
        first_unnamed = submits(send(unnamed, type="append", id="a", text=text) + send(unnamed, type="flush", id="a"))
    assert first_unnamed[0].voice.id == "kokoro/z"
    assert first_unnamed[0].text == first_named[0].text == "各位旅客请注意，"
    session = make_mixed()
    effects, _ = speak_all_jobs(session, send(session, type="speak", id="b", text=text))
    marks = sent(effects, protocol.Mark)
    assert marks[0].text == "各位旅客请注意，" and len(marks) >= 2


def test_romance_languages_start_with_a_whole_short_sentence():
    # A cut inside a French phrase was misheard ("train | pour Lyon"): Kokoro's French first
    # unit is the whole sentence up to 80 characters, and a clause when it is longer.
    voices = MIXED_VOICES | {"kokoro/f": VoiceInfo("kokoro/f", "F", ("fr", "en"), "kokoro", 24000, "kokoro", "f")}

    def first_job(text: str, **fields: str):  # type: ignore[no-untyped-def]
        cfg = Config(cache_dir="/tmp/rtts-test", models_dir="/tmp/rtts-test")
        session = Session("s1", cfg, FixedCatalog(voices, "piper/a"), Clock())
        (job,) = submits(send(session, type="speak", id="u", text=text, **fields))
        return job

    job = first_job("Le prochain train pour Lyon partira du quai 3.", lang="fr")
    assert job.voice.id == "kokoro/f" and job.text == "Le prochain train pour Lyon partira du quai 3."
    text = "Mesdames et messieurs, le prochain train pour Lyon partira du quai numéro trois dans cinq minutes."
    assert first_job(text, lang="fr").text == "Mesdames et messieurs,"
    # English's first unit is its clause: Kokoro cuts its first words off as the first run,
    # as long as this box's speed needs (KokoroEngine.head_tokens).
    assert first_job("Please stand clear of the closing doors.", voice="kokoro/z", lang="en").text == (
        "Please stand clear of the closing doors.")
    text = "The morning train to Boston leaves from platform four at ten thirty."
    assert first_job(text, voice="kokoro/z", lang="en").text == text


def test_frames_over_the_message_rate_are_dropped_unread_then_the_connection_closes():
    """Issue 20, bug 5: a flood of small messages is bounded per connection (limits.message_rate)."""
    session, clock = make(message_rate=100, message_burst=8)
    assert session.open()
    assert sent(session.open(), protocol.Ready)[0].limits["message_rate"] == 100
    pongs = [sent(send(session, type="ping", t=i), protocol.Pong) for i in range(8)]
    assert all(pongs)
    # The ninth is refused, and the next are dropped without being decoded (garbage too).
    assert errors(send(session, type="ping", t=9)) == ["rate_limited"]
    for _ in range(6):
        assert session.receive(b"\xc1garbage") == []
    clock.t += 0.105  # 10.5 tokens: the debt (-7) is paid and 3 more may pass
    assert [len(sent(send(session, type="ping", t=i), protocol.Pong)) for i in range(4)] == [1, 1, 1, 0]
    # A client that keeps on once told is closed with 1008 when it owes a whole burst.
    effects = []
    for _ in range(8):
        effects = send(session, type="ping", t=0)
    assert errors(effects) == ["rate_limited"]
    assert [e.code for e in effects if isinstance(e, Close)] == [protocol.CloseCode.POLICY]


def test_messages_made_in_this_process_are_not_rate_limited():
    """``handle`` (rtts say, /tts, the OpenAI route) is not a client's frame: its caller bounds it."""
    session, _ = make(message_rate=1, message_burst=1)
    session.open()
    for i in range(20):
        assert sent(session.handle(protocol.Ping(float(i))), protocol.Pong)


def test_every_rate_the_opus_refusal_lists_is_accepted():
    """Issue 20: hello with opus at 22,050 Hz was told 12,000 Hz would do, and 12,000 is refused."""
    import re

    session, _ = make()
    (err,) = sent(send(session, type="hello", v=1, sample_rate=22050, format="opus"), protocol.Error)
    listed = [int(r) for r in re.search(r"sample_rate ([\d, ]+), not", err.message).group(1).split(", ")]
    assert listed and 12000 not in listed
    for rate in listed:
        (ready,) = sent(send(session, type="hello", v=1, sample_rate=rate, format="opus"), protocol.Ready)
        assert ready.sample_rate == rate and ready.format == "opus"


# ---------------------------------------------------------------- playing in step


def test_a_pong_carries_the_shared_clock_and_ready_offers_it():
    session, clock = make(shared_clock="host", sync_max_lead=1.5)
    ready = sent(session.open(), protocol.Ready)[0]
    assert ready.clock == {"source": "host", "max_lead_ms": 1500}
    assert ready.limits["sync_max_lead_ms"] == 1500
    clock.t = 250.5
    assert sent(send(session, type="ping", t="client-ms")) == [protocol.Pong("client-ms", server_time=UNIX0 + 250.5)]


def test_an_announcement_starts_with_its_play_at_and_a_speak_without():
    from rtts.broadcast.announcements import Announcement

    session, _ = make()
    ann = Announcement("lobby", "Hello there.", "piper/a", None, 1.0, "normal", None, seq=4, published=UNIX0,
                       play_at=UNIX0 + 0.8)
    start = sent(session.announce(ann), protocol.Start)[0]
    assert (start.id, start.channel, start.play_at) == ("lobby#4", "lobby", UNIX0 + 0.8)
    assert sent(send(session, type="speak", id="own", text="Mine."), protocol.Start) == []  # queued behind it
    other, _ = make()
    assert sent(send(other, type="speak", id="own", text="Mine."), protocol.Start)[0].play_at is None


def test_the_generator_asked_for_goes_with_every_job_of_its_utterance() -> None:
    # Issue 31: a request may name Kokoro's waveform generator; hello names it for the
    # connection, speak and append for one utterance, and every job of it carries it.
    session, _ = make()
    session.open()
    effects = send(session, type="speak", id="a", text="One. Two.", voice="kokoro/b", generator="student")
    jobs = _all_jobs(session, effects)
    assert len(jobs) >= 2 and {j.generator for j in jobs} == {"student"}
    assert {j.generator for j in _all_jobs(session, send(session, type="speak", id="b", text="Hi.", voice="kokoro/b"))} == {None}
    send(session, type="hello", v=1, generator="teacher")
    assert {j.generator for j in _all_jobs(session, send(session, type="speak", id="c", text="Hi.", voice="kokoro/b"))} == {"teacher"}
    created = send(session, type="append", id="d", text="Hi there. ", voice="kokoro/b", generator="auto")
    created += send(session, type="flush", id="d")
    assert {j.generator for j in _all_jobs(session, created)} == {"auto"}


def _all_jobs(session: Session, first_effects) -> list:  # type: ignore[no-untyped-def]
    """Every job ``first_effects`` leads to, each answered as the worker would."""
    jobs, queue = [], submits(first_effects)
    while queue:
        job = queue.pop(0)
        jobs.append(job)
        queue += submits(run_job(session, job))
    return jobs


def test_an_announcement_speaks_with_its_publishers_generator_not_the_connections() -> None:
    from rtts.broadcast.announcements import Announcement

    session, _ = make()
    session.open()
    send(session, type="hello", v=1, generator="student")  # this connection's own utterances only
    named = Announcement("lobby", "Hello there.", "kokoro/b", None, 1.0, "normal", None, generator="teacher",
                         seq=4, published=UNIX0)
    assert {j.generator for j in _all_jobs(session, session.announce(named))} == {"teacher"}
    unnamed = Announcement("lobby", "Hello again.", "kokoro/b", None, 1.0, "normal", None, seq=5, published=UNIX0)
    assert {j.generator for j in _all_jobs(session, session.announce(unnamed))} == {None}


def test_end_counts_the_audio_a_client_waited_for():
    """Issue 32: ``end.stats.underruns`` and ``late_ms`` say what a client playing from its
    first frame waited for, by what the server sent: the second unit's audio 0.2 s after
    the first unit's had run out is one underrun of ~200 ms; in time, none."""
    for wait, underruns, late_ms in ((0.7, 1, 200.0), (0.3, 0, 0.0)):
        session, clock = make()
        (first,) = submits(send(session, type="speak", id="u", text="First sentence here. Second sentence here."))
        clock.t += 0.1
        effects = session.job_event(first, JobAudio(tone(0.5, first.voice.native_rate)))
        effects += session.job_event(first, JobDone(0.05))  # 0.5 s sent at 100.1: it runs out at 100.6
        (second,) = submits(effects)
        clock.t += wait
        (end,) = sent(run_job(session, second, seconds=0.5), protocol.End)
        assert end.stats["underruns"] == underruns
        assert end.stats["late_ms"] == pytest.approx(late_ms, abs=25)  # the resampler holds a frame's part back


def test_a_wait_for_appended_text_is_not_the_servers():
    """An ``append`` stream whose audio ran out before its next text came waited for its
    feeder: not counted. Text that came in time and audio that did not: counted."""
    for text_at, audio_at, underruns in ((1.0, 1.2, 0), (0.3, 0.9, 1)):
        session, clock = make()
        (first,) = submits(send(session, type="append", id="s", text="Hello world, how are you today? I"))
        clock.t += 0.1
        effects = run_job(session, first, seconds=0.5)  # sent at 100.1: it runs out at 100.6
        clock.t = 100.0 + text_at
        effects += send(session, type="append", id="s", text=" am fine.")
        effects += send(session, type="flush", id="s")
        (second,) = submits(effects)
        clock.t = 100.0 + audio_at
        (end,) = sent(run_job(session, second, seconds=0.5), protocol.End)
        assert end.stats["underruns"] == underruns
