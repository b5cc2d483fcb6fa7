"""What the inference thread and a stream waiting for room do, 10 ms apart (issue 32).

    python3 benchmarks/experiments/waiting_probe.py

The scenario of ``tests/live/test_scheduling.py``'s stream past the load, on a server in
this process (the phrase cache on, as served; ``--admission-max-load 0.01``, so the second
stream must wait for the first): a Piper stream of one sentence said six times, read as it
comes, and a short one asked just after it. Every 10 ms it samples the waiting streams,
whether the thread is idle, the running job, the streams between two units and each
connection's outbox (KiB queued, units held for backpressure), and prints a line where
any of them changes; then each unit's submit and end, and the server's count of the wait
(``rtts_contended_seconds``, of it ``rtts_contended_idle_seconds``). Used for
docs/benchmarks.md, "While streams wait for room": the cached last unit, and why a stream
whose next unit waits for its client's outbox is not taken off the thread at once.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.conftest import Client, ServerThread, make_config
from tests.live.test_scheduling import PIPER

TEXT = " ".join(["The morning train to Boston leaves from platform four at ten thirty."] * 6)


def main() -> int:
    config = make_config(Path(tempfile.mkdtemp()), admission_max_load=0.01, default_voice=PIPER)
    with ServerThread(config) as srv, Client(srv.url) as a, Client(srv.url) as b:
        a.recv(), b.recv()
        a.send(type="speak", id="warm", text="Hello.")
        a.utterance("warm")  # the voice loaded and its rate measured
        worker, t0 = srv.service.worker, time.monotonic()
        events: list[str] = []
        submit, ended = worker.submit, worker._ended_job

        def traced_submit(job):  # type: ignore[no-untyped-def]
            events.append(f"{time.monotonic() - t0:.3f} submit {job.utterance} last={job.last} {job.text[:24]!r}")
            submit(job)

        def traced_ended(job, turn_s=0.0):  # type: ignore[no-untyped-def]
            events.append(f"{time.monotonic() - t0:.3f} ended {job.utterance} last={job.last}")
            ended(job, turn_s)

        worker.submit, worker._ended_job = traced_submit, traced_ended  # type: ignore[method-assign]
        rows: list[tuple] = []
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                current = worker.current
                outboxes = tuple((c.outbox.bytes // 1024, len(c._held)) for c in list(srv.server._live.values()))
                rows.append((round(time.monotonic() - t0, 3), worker.waiting, worker.idle,
                             current.utterance if current else None, len(worker._ended), outboxes))
                time.sleep(0.01)

        sampler = threading.Thread(target=sample)
        sampler.start()
        heard: dict[str, list] = {}
        reader = threading.Thread(target=lambda: heard.setdefault("long", a.utterance("long")))
        a.send(type="speak", id="long", text=TEXT)
        reader.start()
        b.send(type="speak", id="late", text="Doors closing.")
        late = b.utterance("late")
        reader.join()
        done.set()
        sampler.join()
        print("t (s), streams waiting, thread idle, running, streams between units, outboxes (KiB, units held)")
        last = None
        for row in rows:
            if row[1:] != last:
                print(row)
                last = row[1:]
        print("\n".join(events))
        waited, idle = worker.contended()
        print(f"the short stream's first audio {late[-1].stats['ttfa_ms']:.0f} ms; it waited {waited:.2f} s for room, "
              f"the thread idle {idle:.2f} s of it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
