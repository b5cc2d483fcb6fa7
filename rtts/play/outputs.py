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

        def callback(outdata: np.ndarray, frames: int, when, status) -> None:  # type: ignore[no-untyped-def]
            now = time.monotonic()
            delay = when.outputBufferDacTime - when.currentTime
            if not 0.0 <= delay < 2.0:  # a backend that gives no timestamps
                delay = float(stream.latency)
            self.latency_s = delay
            if status.output_underflow:
                self.xruns += 1
            try:
                outdata[:] = to_channels(fill(now + delay + self.trim_s, frames), self.channels)
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
