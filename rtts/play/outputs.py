"""Where a player's samples go, and when each block is heard.

An output calls ``fill(heard_at, frames)`` for each block it is about to play, with the
time (``time.monotonic()``'s clock) at which the block's first sample will be heard, and
plays the mono float32 samples it gets back on every output channel.

- ``DeviceOutput``: a sound device through PortAudio (``sounddevice``: ALSA, or
  PulseAudio/PipeWire through ALSA's plugin). When a block is heard is what PortAudio
  measures for it (``outputBufferDacTime``, from the device's own delay), plus a trim for
  sinks that report nothing (HDMI, Bluetooth), never a guess of ours.
- ``PacedFile``: 16-bit PCM written in real time to a file, a FIFO or stdout, block by
  block on the monotonic clock, with silence between announcements: a Snapcast pipe or
  process source. A block written now is heard ``lead_s`` later (Snapcast's buffer), so
  every snapclient plays the announcement at its ``play_at``.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import BinaryIO, Protocol

import numpy as np

log = logging.getLogger(__name__)

Fill = Callable[[float, int], np.ndarray]


class Output(Protocol):
    rate: int
    latency_s: float  # the last measured time from a block's fill to it being heard
    xruns: int  # blocks the output played late or not at all (its own underflows)

    def start(self, fill: Fill) -> None: ...

    def stop(self) -> None: ...


# What PortAudio is asked to keep queued on the device. When a block is heard is measured,
# so a deeper queue costs no precision, only reaction to audio that arrives later than
# its lead (rare: play_at is set ahead for that); at 20 ms ALSA's PulseAudio plugin ran
# dry when the box was busy.
DEVICE_LATENCY_S = 0.1


def to_channels(mono: np.ndarray, channels: int) -> np.ndarray:
    return np.repeat(mono[:, None], channels, axis=1)


class BlockDates:
    """When a device block is heard, on ``time.monotonic()``'s clock, from the date
    PortAudio gives it (``outputBufferDacTime``) when it asks for the block.

    The callback may run milliseconds after PortAudio asked: the player's other thread holds
    the GIL while it takes in an announcement (5 ms, Python's switch interval, and up to
    16 ms; two busy loops on the box alone did not delay it: benchmarks/device_dates.py).
    The callback's own time plus the device's delay would date the block that much late,
    and the player would play it early by as much, differently on each box. PortAudio's
    date does not move with it: it is
    converted to the monotonic clock by the two clocks' offset read now. ALSA's PortAudio
    dates on ``time.time()``'s clock (within 0.3 ms, measured), other builds may use the
    monotonic one: the clock is the one the first date is near. A backend that gives no
    dates (zeros) falls back to the callback's time plus the stream's latency, one that
    dates on a clock of its own to the callback's time plus the date's delay."""

    CLOCKS: tuple[Callable[[], float], ...] = (time.time, time.monotonic)

    def __init__(self, monotonic: Callable[[], float] = time.monotonic,
                 clocks: tuple[Callable[[], float], ...] = CLOCKS) -> None:
        self._monotonic, self._clocks = monotonic, clocks
        self._clock: Callable[[], float] | None = None
        self._known = False

    def heard(self, current: float, dac: float, latency: float) -> float:
        if not self._known and current > 0:
            self._known = True
            self._clock = next((c for c in self._clocks if abs(c() - current) < 1.0), None)
        delay = dac - current
        if current <= 0 or not 0.0 <= delay < 2.0:
            return self._monotonic() + latency
        if self._clock is None:  # dated on a clock of its own: its delay from now, as before
            return self._monotonic() + delay
        return dac + (self._monotonic() - self._clock())


class DeviceOutput:
    def __init__(self, device: str, rate: int, channels: int, block_ms: int, trim_s: float = 0.0) -> None:
        self.device: str | int | None = None if device == "default" else int(device) if device.isdigit() else device
        self.rate, self.channels, self.trim_s = rate, channels, trim_s
        self.block = rate * block_ms // 1000
        self.latency_s = 0.0
        self.xruns = 0
        self._stream = None

    def start(self, fill: Fill) -> None:
        import sounddevice as sd

        dates = BlockDates()

        def callback(outdata: np.ndarray, frames: int, when, status) -> None:  # type: ignore[no-untyped-def]
            now = time.monotonic()
            heard = dates.heard(when.currentTime, when.outputBufferDacTime, float(stream.latency))
            self.latency_s = heard - now
            if status.output_underflow:
                self.xruns += 1
            try:
                outdata[:] = to_channels(fill(heard + self.trim_s, frames), self.channels)
            except Exception:
                log.exception("rendering a block failed; playing silence")
                outdata.fill(0)

        stream = sd.OutputStream(device=self.device, samplerate=self.rate, channels=self.channels, dtype="float32",
                                 blocksize=self.block, latency=DEVICE_LATENCY_S, callback=callback)
        self._stream = stream
        stream.start()
        log.info("playing on %s at %d Hz, %d channels; PortAudio's latency %.1f ms",
                 stream.device, self.rate, self.channels, stream.latency * 1000)

    def stop(self) -> None:
        if self._stream is not None:
            self._stream.stop()
            self._stream.close()


class PacedFile:
    def __init__(self, path: str, rate: int, channels: int, block_ms: int, lead_s: float = 0.0) -> None:
        self.path, self.rate, self.channels, self.lead_s = path, rate, channels, lead_s
        self.block = rate * block_ms // 1000
        self.latency_s = lead_s
        self.xruns = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, fill: Fill) -> None:
        self._thread = threading.Thread(target=self._run, args=(fill,), name="rtts-play-file", daemon=True)
        self._thread.start()

    def _open(self) -> BinaryIO:
        if self.path == "-":
            return sys.stdout.buffer
        return open(self.path, "wb", buffering=0)  # a FIFO: blocks until its reader opens it

    def _run(self, fill: Fill) -> None:
        try:
            sink = self._open()
            due = time.monotonic()
            while not self._stop.is_set():
                mono = fill(due + self.lead_s, self.block)
                pcm = np.clip(np.rint(to_channels(mono, self.channels) * 32767), -32768, 32767).astype("<i2")
                sink.write(pcm.tobytes())
                due += self.block / self.rate
                late = time.monotonic() - due
                if late > 0.2:  # the reader stalled (or the box did): start the pace again
                    self.xruns += 1
                    due = time.monotonic()
                else:
                    self._stop.wait(max(0.0, -late))
        except BrokenPipeError:
            log.error("the reader of %s went away", self.path)
        except Exception:
            log.exception("writing to %s failed", self.path)
        finally:
            self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)


def make_output(output: str, rate: int, channels: int, block_ms: int, trim_s: float) -> Output:
    if output == "-" or output.startswith("file:"):
        return PacedFile(output.removeprefix("file:"), rate, channels, max(block_ms, 20), lead_s=trim_s)
    return DeviceOutput(output, rate, channels, block_ms, trim_s)
