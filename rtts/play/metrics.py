"""The player's figures in Prometheus' text format, read from its state at each scrape
(``prometheus_client``, as the server's /metrics): whether it is connected, how well it
knows the server's clock, the output's measured latency, and what went wrong."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from rtts.play.listener import Listener
from rtts.play.outputs import Output
from rtts.play.player import Player


class PlayerCollector(Collector):
    def __init__(self, player: Player, listener: Listener, output: Output) -> None:
        self.player, self.listener, self.output = player, listener, output

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        with self.player.lock:
            counts = self.player.timeline.counts
            clock = self.player.clock
            steering = self.player.steering
            rows = [
                ("announcements", "announcements started", counts.announcements),
                ("underruns", "runs of due audio that had not arrived", counts.underruns),
                ("late_joins", "announcements first heard after their first sample was due", counts.late_joins),
                ("cuts", "announcements cut by a high-priority one", counts.cuts),
                ("drift_corrections", "single samples dropped or repeated to stay on the shared clock", steering.corrections),
                ("jumps", "times the read position jumped to the shared clock", steering.jumps),
                ("silent_shifts", "times the read position moved at once where nothing was heard", steering.shifts),
            ]
            clock_error = clock.error if clock.ready else float("nan")
            clock_samples = clock.samples
        for name, doc, value in rows:
            yield CounterMetricFamily(f"rtts_player_{name}", doc, value=value)
        yield CounterMetricFamily("rtts_player_connects", "connections made", value=self.listener.counts.connects)
        yield CounterMetricFamily("rtts_player_connect_failures", "connections lost or refused", value=self.listener.counts.failures)
        yield CounterMetricFamily("rtts_player_missed", "announcements made while away", value=self.listener.counts.missed)
        yield CounterMetricFamily("rtts_player_output_xruns", "blocks the output itself played late", value=self.output.xruns)
        yield GaugeMetricFamily("rtts_player_connected", "1 while connected", value=int(self.listener.counts.connected))
        # A bound, not the error: on a 50 ms link it is ~30 ms while the estimate is within a
        # millisecond (the intersection is as wide as the fastest ways out and back together).
        yield GaugeMetricFamily("rtts_player_clock_error_seconds", "at most how wrong the shared clock estimate is", value=clock_error)
        yield GaugeMetricFamily("rtts_player_clock_samples", "clock exchanges the estimate rests on", value=clock_samples)
        yield GaugeMetricFamily("rtts_player_output_latency_seconds", "the output's measured latency", value=self.output.latency_s)
