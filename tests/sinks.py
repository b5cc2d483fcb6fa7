"""Virtual loudspeakers for headless players (rtts play), and a microphone on all of them.

A private PulseAudio daemon (its own runtime dir: nothing of the host's is touched) with one
null sink of N channels; each player plays into a mono sink remapped onto one channel of it
(``PULSE_SINK``), so one recording of the null sink's monitor holds every player, side by
side on one clock. ``Recording`` keeps, with the samples, when PortAudio says each block
was captured (``inputBufferAdcTime``), mapped to the host's wall clock: the clock
``play_at`` is on when the server's shared clock is its host's.

Where a player's audio lands in the recording is found by cross-correlating it with the
announcement's own audio, as a plain subscriber received it (``locate``): no onset
threshold, so a quiet start or a leading silence does not move it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PULSEAUDIO = shutil.which("pulseaudio")
RATE = 48000
# ALSA's own channel order for 2, 4 and 6 channels: what PortAudio's "pulse" device asks
# for, so a recording of the room's monitor gets each loudspeaker in its own column
# (with PulseAudio's aux positions it remixed them all into one).
POSITIONS = ("front-left", "front-right", "rear-left", "rear-right", "front-center", "lfe")


class Speakers:
    """``with Speakers(2) as s: env = s.env(0)`` — the environment a player (or anything
    that plays through PortAudio's "pulse" device) needs to play into channel 0."""

    def __init__(self, count: int) -> None:
        assert 1 <= count <= len(POSITIONS)
        self.count = count
        self.channels = 2 if count <= 2 else 4 if count <= 4 else 6
        self.dir = Path(tempfile.mkdtemp(prefix="rtts-pulse-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Speakers:
        assert PULSEAUDIO is not None, "pulseaudio is not installed"
        env = {**os.environ, "XDG_RUNTIME_DIR": str(self.dir), "HOME": str(self.dir)}
        positions = ",".join(POSITIONS[: self.channels])
        modules = ["-L", "module-native-protocol-unix",
                   "-L", f"module-null-sink sink_name=room rate={RATE} channels={self.channels} channel_map={positions}"]
        for i in range(self.count):
            modules += ["-L", f"module-remap-sink sink_name=speaker{i} master=room channels=1 channel_map=mono "
                              f"master_channel_map={POSITIONS[i]} remix=no"]
        # -n: none of the host's default.pa; as root PulseAudio warns but runs.
        self.proc = subprocess.Popen([PULSEAUDIO, "-n", "--daemonize=no", "--exit-idle-time=-1", "--use-pid-file=no",
                                      "--log-target=stderr", *modules], env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not (self.dir / "pulse" / "native").exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("pulseaudio did not start")
            time.sleep(0.05)
        return self

    def env(self, channel: int | None = None, source: str | None = None) -> dict[str, str]:
        env = {"PULSE_SERVER": f"unix:{self.dir / 'pulse' / 'native'}", "PULSE_RUNTIME_PATH": str(self.dir / "pulse")}
        if channel is not None:
            env["PULSE_SINK"] = f"speaker{channel}"
        if source is not None:
            env["PULSE_SOURCE"] = source
        return env

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


# Run in a child process of its own, so that its PortAudio reads this PulseAudio's
# environment: samples to OUT.f32, and one row per block (first frame, wall time it was
# captured) to OUT.times.
_RECORDER = r"""
import sys, time, numpy as np, sounddevice as sd
out, channels = sys.argv[1], int(sys.argv[2])
data, times = open(out + ".f32", "wb"), []
frames = [0]
def cb(indata, n, when, status):
    # PortAudio's own date of the block, not the callback's time plus a delay, as the
    # players date theirs (rtts/play/outputs.py, BlockDates): ALSA's PortAudio dates on the
    # wall clock.
    now_wall = time.time()
    if when.currentTime and abs(when.currentTime - now_wall) < 1.0:
        captured = when.inputBufferAdcTime
    else:
        captured = now_wall + (when.inputBufferAdcTime - when.currentTime if when.currentTime else 0.0)
    times.append((frames[0], captured))
    frames[0] += n
    data.write(indata.astype(np.float32).tobytes())
with sd.InputStream(device="pulse", samplerate=48000, channels=channels, dtype="float32", blocksize=480, callback=cb):
    sys.stdin.read()
data.close()
np.save(out + ".times.npy", np.array(times))
"""


@dataclass
class Take:
    samples: np.ndarray  # [frames, channels]
    times: np.ndarray  # rows (first frame of a block, wall time it was captured)

    def wall(self, frame: float) -> float:
        """When recorded frame ``frame`` was captured: the least-squares line through the
        blocks' times (single block times jitter by a tenth of a ms)."""
        slope, icpt = np.polyfit(self.times[:, 0], self.times[:, 1], 1)
        return float(slope * frame + icpt)


class Recording:
    """``with Recording(speakers, path) as r: ...``, then ``r.take()``."""

    def __init__(self, speakers: Speakers, path: Path) -> None:
        self.speakers, self.path = speakers, path
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Recording:
        env = {**os.environ, **self.speakers.env(source="room.monitor")}
        self.proc = subprocess.Popen([sys.executable, "-c", _RECORDER, str(self.path), str(self.speakers.channels)],
                                     env=env, stdin=subprocess.PIPE)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(20)

    def take(self) -> Take:
        raw = np.fromfile(f"{self.path}.f32", np.float32).reshape(-1, self.speakers.channels)
        return Take(raw, np.load(f"{self.path}.times.npy"))


def locate(recorded: np.ndarray, reference: np.ndarray, start: int, length: int, around: int | None = None) -> float:
    """The frame of ``recorded`` (one channel) at which ``reference[start]`` is heard, by
    cross-correlating ``reference[start:start + length]`` with the recording (within
    ``around`` ± 2 s of a frame, when given)."""
    piece = reference[start : start + length]
    lo = 0 if around is None else max(0, around - 2 * RATE)
    hi = recorded.size if around is None else min(recorded.size, around + 2 * RATE + length)
    hay = recorded[lo:hi]
    n = 1 << int(np.ceil(np.log2(hay.size + piece.size)))
    corr = np.fft.irfft(np.fft.rfft(hay, n) * np.conj(np.fft.rfft(piece, n)), n)[: hay.size - piece.size + 1]
    best = int(np.argmax(corr))
    # A parabola through the peak and its neighbours: the lag to a fraction of a sample.
    if 0 < best < corr.size - 1:
        a, b, c = corr[best - 1], corr[best], corr[best + 1]
        shift = 0.5 * (a - c) / (a - 2 * b + c) if a - 2 * b + c else 0.0
    else:
        shift = 0.0
    return lo + best + shift
