"""Headless players in step (issue 33): how far apart ``rtts play`` processes make one
announcement heard, on one instance and across two (Redis bus, instance B's host clock 30
ms off, both on the Redis host's clock), each player through a link of its own (0, 33, 66
and 100 ms one way, each ± 20 ms), and two Snapcast clients fed by a channel.

Each player plays through PortAudio into a loudspeaker of its own, one channel of a
private PulseAudio null sink, all recorded together with capture timestamps
(tests/sinks.py); where each one's audio lands is found by cross-correlating the
recording with the announcement as a plain subscriber received it (tests/players.py),
at its first sound and 60 s in. The announcement is Mandarin with no voice named
(tests/texts.py STATION_ZH, a minute), published on instance A.

    python benchmarks/players.py                 # every cell, one round (~6 min)
    python benchmarks/players.py --rounds 3      # medians of three
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from latency import cpu_model, probe_ms  # noqa: E402

from tests.conftest import Client, RedisServer, RttsProcess  # noqa: E402
from tests.netdelay import DelayProxy  # noqa: E402
from tests.players import CHANNEL, announce, heard, player, reference, settle, snapcast_zones  # noqa: E402
from tests.sinks import RATE, Recording, Speakers  # noqa: E402
from tests.texts import STATION_EN_SHORT, STATION_ZH  # noqa: E402

TOKEN = "bench-publish"
LINKS = [(0, 20), (33, 20), (66, 20), (100, 20)]
SERVER_ARGS = ("--publish-token", TOKEN, "--preload", "--phrase-cache-mb", "0", "--sync-min-lead", "4",
               "--sync-max-lead", "8", "--generator", "student")


def warm(url: str) -> None:
    with Client(url) as c:
        c.send(type="speak", id="warm", text="你好。")
        c.utterance("warm", timeout=120)


def players_cell(tmp: Path, instances: int) -> dict[str, object]:
    """Four players: all on one instance, or two on each of two."""
    with ExitStack() as stack:
        args: tuple[str, ...] = SERVER_ARGS
        if instances == 2:
            redis = stack.enter_context(RedisServer(_dir(tmp / "redis")))
            args = ("--bus", redis.url, "--shared-clock", "bus", *SERVER_ARGS)
        servers = [stack.enter_context(RttsProcess(_dir(tmp / "a"), *args))]
        if instances == 2:
            servers.append(stack.enter_context(RttsProcess(_dir(tmp / "b"), *args, env={"RTTS_TEST_CLOCK_SKEW_MS": "30"})))
        for s in servers:
            s.wait_listening()
            warm(s.url)
        speakers = stack.enter_context(Speakers(len(LINKS)))
        players = []
        for i, (delay, jitter) in enumerate(LINKS):
            target = servers[i % len(servers)]
            proxy = stack.enter_context(DelayProxy(target.port, delay, jitter, seed=i))
            players.append(stack.enter_context(player(tmp, speakers, i, f"ws://127.0.0.1:{proxy.port}/ws")))
        ref = reference(servers[0].url)
        stack.callback(ref.close)
        settle(players)
        result = announce(tmp, speakers, players, ref, servers[0].url, STATION_ZH, TOKEN, positions_s=(0.0, 60.0))
        heard_first = min(result.at["start"])
        return {
            "spread start": result.spread_ms("start"), "spread 60 s": result.spread_ms("60 s"),
            "from play_at": statistics.median(result.from_play_at_ms("start") + result.from_play_at_ms("60 s")),
            "underruns": sum(m["rtts_player_underruns_total"] + m["rtts_player_late_joins_total"] for m in result.metrics),
            "publish to heard": heard_first - result.sent,
            "lead": result.play_at - result.sent,
        }


def snapcast_cell(tmp: Path) -> dict[str, object]:
    """A channel as a Snapcast pipe source, two snapclients on loudspeakers of their own."""
    with ExitStack() as stack:
        srv = stack.enter_context(RttsProcess(_dir(tmp / "a"), *SERVER_ARGS))
        srv.wait_listening()
        speakers = stack.enter_context(Speakers(2))
        snapcast_zones(stack, tmp, srv.url, speakers)
        ref = reference(srv.url)
        stack.callback(ref.close)
        import numpy as np

        from rtts import protocol

        with Recording(speakers, tmp / "room") as recording:
            time.sleep(0.5)
            with Client(srv.url) as c:
                sent = time.time()
                c.send(type="publish", channel=CHANNEL, text=STATION_EN_SHORT, token=TOKEN)
                published = c.until(protocol.Published, timeout=10)[-1]
            msgs = ref.utterance(published.id, timeout=60)  # type: ignore[union-attr]
            start, end = msgs[0], msgs[-1]
            pcm = np.concatenate([np.frombuffer(m.data, "<i2").astype(np.float32) / 32768 for m in msgs
                                  if isinstance(m, protocol.Audio)])
            time.sleep(max(0.0, start.play_at + end.stats["audio_ms"] / 1000 + 1.5 - time.time()))  # type: ignore[union-attr]
        take = recording.take()
        first = int(np.argmax(np.abs(pcm) > 0.05))
        at = [heard(take.samples[:, i], take.wall, pcm, first) - first / RATE for i in range(2)]
        return {"spread start": abs(at[0] - at[1]) * 1000, "spread 60 s": None,
                "from play_at": statistics.median((t - start.play_at) * 1000 for t in at),  # type: ignore[union-attr]
                "underruns": None, "publish to heard": min(at) - sent, "lead": start.play_at - sent}  # type: ignore[union-attr]


def _dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    print(f"host: {cpu_model()}; host probe {probe_ms():.0f} ms; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    cells = {"4 players, one instance": lambda t: players_cell(t, 1),
             "4 players, two instances (2 + 2)": lambda t: players_cell(t, 2),
             "2 snapclients (a channel as a Snapcast source)": snapcast_cell}
    print("| setup | spread at first sound (ms) | spread 60 s in (ms) | from play_at (ms) | underruns | publish → heard (s) | lead (s) |")
    print("|---|---|---|---|---|---|---|")
    for name, cell in cells.items():
        rows = []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="rtts-players-") as tmp:
                rows.append(cell(Path(tmp)))
        def med(key: str) -> str:
            values = [r[key] for r in rows if r[key] is not None]
            return "—" if not values else f"{statistics.median(values):.2f}"  # type: ignore[type-var]
        print(f"| {name} | {med('spread start')} | {med('spread 60 s')} | {med('from play_at')} | {med('underruns')} | "
              f"{med('publish to heard')} | {med('lead')} |", flush=True)
    print(f"each cell the median of {args.rounds} round(s); host probe after: {probe_ms():.0f} ms")


if __name__ == "__main__":
    main()
