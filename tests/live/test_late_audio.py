"""What the server counts of the audio a client waited for (``end.stats.underruns``,
``late_ms``; ``rtts_underruns_total``), against a real client playing from its first frame
(the counting itself: tests/unit/test_session.py)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from rtts import protocol
from tests.conftest import DEFAULT_GENERATOR, Client, ServerThread, make_config
from tests.live.test_server import fetch

# Japanese with no voice named, by the users' default generator (Kokoro's own): a unit's
# runs are cut only after punctuation (kokoro.PACED_AT_BREAKS_ONLY), so the second sentence
# below is made in one run, 0.4 s or more on any box, whatever the audio in hand.
FIRST, REST = "おはようございます。次", "の電車は十時三十分に東京駅を出発します。"
# How long before the first sentence's audio runs out the second is sent: more than a
# loaded box's lag between a frame leaving the server and its client reading it (the
# server must have the text before its own count of that audio runs out), less than the
# second sentence's run.
BEFORE_S = 0.2
PARAGRAPH = ("请注意，本次列车即将到达杭州东站，下车的旅客请带好您的随身物品。"
             "从列车前进方向的右侧车门下车，换乘地铁的旅客请按照指示牌前往一号线。"
             "本次列车的终点站是上海虹桥站，预计到达时间为下午三点四十五分，感谢您的耐心等待。"
             "列车运行期间请不要在车厢内吸烟，如需帮助请联系列车工作人员或者拨打服务热线。"
             "餐车位于第五节车厢，供应热饭、面条和饮料，营业时间从上午十点到晚上八点。"
             "携带大件行李的旅客请将行李放在车厢两端的行李架上，不要堵塞通道和车门。"
             "前方到站是嘉兴南站，停车两分钟，请在嘉兴南站下车的旅客提前做好准备。"
             "祝您旅途愉快，欢迎您再次乘坐本次列车，我们期待下次继续为您服务。")


class Player:
    """A strict player of a connection's audio: an utterance plays from its first frame
    (after the one before, as the server takes it), in real time, and each wait for audio
    that had not come is counted (as benchmarks/latency.py's listeners do)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.runs_out: float | None = None
        self.waited_s = 0.0

    def take(self, msg: protocol.ServerMessage) -> None:
        if not isinstance(msg, protocol.Audio):
            return
        now = time.monotonic()
        if msg.seq > 0 and self.runs_out is not None and now > self.runs_out:
            self.waited_s += now - self.runs_out
        self.runs_out = max(self.runs_out or now, now) + len(msg.data) / 2 / self.rate

    def play_until(self, c: Client, before_s: float) -> None:
        """Take what comes until ``before_s`` before the audio in hand runs out (what has
        come by then taken too: a unit's frames come together, the first alone in hand)."""
        assert self.runs_out is not None
        while True:
            try:
                self.take(c.recv(max(0.001, self.runs_out - before_s - time.monotonic())))
            except TimeoutError:
                if self.runs_out - before_s <= time.monotonic():
                    return


def _speak_appended(c: Client, utt: str, player: Player, before_s: float) -> protocol.End:
    """An ``append`` stream: a first sentence, then its second when ``before_s`` is left of
    the first's audio (below zero: that long after it ran out), then ``flush``."""
    player.waited_s = 0.0
    c.send(type="append", id=utt, text=FIRST)
    while not isinstance(msg := c.recv(), protocol.Audio):
        pass
    player.take(msg)
    player.play_until(c, before_s)
    c.send(type="append", id=utt, text=REST)
    c.send(type="flush", id=utt)
    while True:
        msg = c.recv()
        player.take(msg)
        if isinstance(msg, protocol.End) and msg.id == utt:
            return msg


def test_the_server_counts_the_wait_a_strict_player_hears(tmp_path: Path) -> None:
    with ServerThread(make_config(tmp_path, generator=DEFAULT_GENERATOR)) as srv, Client(srv.url) as c:
        ready = c.recv()
        assert isinstance(ready, protocol.Ready)
        # The voice loaded and warm: the first unit's audio is then a run's compute away.
        player = Player(ready.sample_rate)
        c.send(type="speak", id="warm", text="こんにちは。")
        for msg in c.utterance("warm"):
            player.take(msg)
        # The next text BEFORE_S before the audio runs out: its run cannot be made in
        # time, and the server says so, as much as the player waited (the two clocks read
        # the same frames a little apart).
        end = _speak_appended(c, "late", player, BEFORE_S)
        assert player.waited_s > 0.1
        assert end.stats["underruns"] >= 1
        assert abs(end.stats["late_ms"] / 1000 - player.waited_s) < 0.1, (end.stats, player.waited_s)
        # The next text 0.3 s after the audio ran out: the player waited for the text,
        # which the server did not have; nothing counted.
        end2 = _speak_appended(c, "fed-late", player, -0.3)
        assert player.waited_s > 0.3
        assert end2.stats["underruns"] == 0 and end2.stats["late_ms"] == 0
        _, _, body = fetch(srv.http + "/metrics")
        counted = re.search(r"^rtts_underruns_total (\S+)$", body.decode(), re.MULTILINE)
        assert counted is not None and float(counted.group(1)) == end.stats["underruns"]


def test_an_underrun_beside_another_stream_lowers_the_admission_bound(tmp_path: Path) -> None:
    """Issue 32: the server that saw a stream underrun while another shared the thread
    lets fewer streams in together for a while: /readyz's ``capacity.max_load`` is below
    ``--admission-max-load``."""
    import json

    # Room for both at once whatever this box's speed (a busy one measured a Kokoro stream
    # at an RTF of 1.1, and held the second back until the first had ended).
    config = make_config(tmp_path, generator=DEFAULT_GENERATOR, admission_max_load=5.0)
    with ServerThread(config) as srv, Client(srv.url) as c, Client(srv.url) as beside:
        ready = c.recv()
        assert isinstance(ready, protocol.Ready) and isinstance(beside.recv(), protocol.Ready)
        player = Player(ready.sample_rate)
        c.send(type="speak", id="warm", text="こんにちは。")
        for msg in c.utterance("warm"):
            player.take(msg)
        capacity = json.loads(fetch(srv.http + "/readyz")[2])["capacity"]
        assert capacity["max_load"] == capacity["configured_max_load"] == config.admission_max_load
        # Another stream on the thread the whole time: a Mandarin paragraph (~60 s of
        # audio, no clause said twice: a short one would come from the phrase cache), by
        # Kokoro too.
        beside.send(type="speak", id="long", text=PARAGRAPH)
        while not isinstance(beside.recv(), protocol.Audio):
            pass
        # Beside a paragraph the first sentence's audio may come in more than one run, the
        # last of them while the second sentence is made: up to three tries for a late one
        # (on a quiet box 4 of 12 single tries had none).
        for attempt in range(3):
            end = _speak_appended(c, f"late{attempt}", player, BEFORE_S)
            if end.stats["underruns"]:
                break
        assert end.stats["underruns"] >= 1
        capacity = json.loads(fetch(srv.http + "/readyz")[2])["capacity"]
        assert capacity["max_load"] < capacity["configured_max_load"] == config.admission_max_load
        beside.send(type="cancel", id="long")
        beside.utterance("long")
