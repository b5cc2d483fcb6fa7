#!/usr/bin/env python3
"""A newcomer's path, timed: the README's own commands on a fresh clone and a fresh venv.

    python3 benchmarks/newcomer.py [--keep]

Issue 34 asks that README → install → hear Mandarin → the page → a kiosk take under ten
minutes from the README alone. This follows the README's first command and its
30-second tour, in order, as a user would type them, and times each step:

1. ``git clone`` of this checkout into a temporary folder, a new venv there;
2. ``pip install .`` (the README's install; pip takes what it needs from the package
   index, or from its cache on a machine that has installed rtts before);
3. ``rtts serve`` until it listens;
4. ``rtts say '欢迎乘坐 …' -o zh.wav`` (the tour's first line, Mandarin with no voice named);
5. the tour's ``curl … /tts?text=下一站…`` (Mandarin through HTTP);
6. the page at ``/``: Mandarin typed, **Speak** pressed, until the page has played audio
   (Debian's headless chromium, as the system tests drive it);
7. the kiosk at ``/kiosk?channel=lobby`` until it is connected and subscribed.

The reading time is not measured: the README's first screen is the two commands and the
tour. Prints each step's seconds and the total, the CPU model and the host probe.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import wave
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import latency  # noqa: E402  (cpu_model, probe_ms)
from tests.ports import free_port  # noqa: E402
ZH_SAY = "欢迎乘坐 Air China 航班CA1234，登机口12号，15:30起飞。"
ZH_TTS = "下一站，杭州东站。"
ZH_PAGE = "各位旅客请注意，列车即将进站。"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keep", action="store_true", help="leave the clone and its venv in place")
    args = p.parse_args()
    print(f"host: {latency.cpu_model()}; host probe {latency.probe_ms():.0f} ms; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="rtts-newcomer-"))
    steps: list[tuple[str, float]] = []
    began = time.monotonic()

    def step(name: str, t0: float) -> None:
        steps.append((name, time.monotonic() - t0))
        print(f"{name}: {steps[-1][1]:.1f} s", flush=True)

    server = None
    try:
        t0 = time.monotonic()
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(work / "rtts")], check=True)
        subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
        step("clone and venv", t0)
        bin_ = work / "venv" / "bin"
        t0 = time.monotonic()
        subprocess.run([str(bin_ / "pip"), "install", "--quiet", "."], cwd=work / "rtts", check=True)
        step("pip install .", t0)
        port = free_port()
        t0 = time.monotonic()
        log = open(work / "serve.log", "w")
        server = subprocess.Popen([str(bin_ / "rtts"), "serve", "--port", str(port)], cwd=work, stdout=log,
                                  stderr=subprocess.STDOUT)
        while "listening on" not in (work / "serve.log").read_text():
            if server.poll() is not None:
                raise SystemExit((work / "serve.log").read_text())
            time.sleep(0.1)
        step("rtts serve, listening", t0)
        t0 = time.monotonic()
        subprocess.run([str(bin_ / "rtts"), "say", ZH_SAY, "-o", "zh.wav"], cwd=work, check=True)
        with wave.open(str(work / "zh.wav")) as w:
            heard = w.getnframes() / w.getframerate()
        step(f"rtts say (Mandarin, {heard:.1f} s of audio)", t0)
        t0 = time.monotonic()
        url = f"http://127.0.0.1:{port}/tts?text={urllib.parse.quote(ZH_TTS)}"
        body = urllib.request.urlopen(url, timeout=120).read()
        step(f"curl /tts (Mandarin, {len(body)} bytes)", t0)
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=shutil.which("chromium"),
                                         args=["--autoplay-policy=no-user-gesture-required"])
            page = browser.new_page()
            t0 = time.monotonic()
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("#speak:not([disabled])", timeout=60_000)
            page.fill("#text", ZH_PAGE)
            page.click("#speak")
            # Played: the page's player has sounded a second of it (24 kHz samples).
            page.wait_for_function("() => Object.values(window.rtts.stats.utterances).some(u => u.played > 24000)",
                                   timeout=120_000)
            step("the page: Mandarin typed, Speak, played", t0)
            kiosk = browser.new_page()
            t0 = time.monotonic()
            kiosk.goto(f"http://127.0.0.1:{port}/kiosk?channel=lobby")
            kiosk.wait_for_function("() => window.rtts.channels.get('lobby') != null", timeout=60_000)
            step("the kiosk: connected, subscribed to lobby", t0)
            browser.close()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    total = time.monotonic() - began
    print(f"\n| step | s |\n|---|---|")
    for name, s in steps:
        print(f"| {name} | {s:.1f} |")
    print(f"| **total** | **{total:.1f}** |")
    print(f"host probe {latency.probe_ms():.0f} ms after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
