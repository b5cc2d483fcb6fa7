"""What Chromium's silent sink suspender does to a context's output timestamps (issue 24).

A context plays an oscillator through a gain of 0 (exact zeros) for ``silence`` seconds,
then at 0.1; every 20 ms the page reads getOutputTimestamp(). Printed: each step of
performanceTime - contextTime larger than 2 ms, and when. With ``--awake`` the page also
plays static/js/player.js's KEEP_AWAKE constant, as a kiosk in step does.

    python benchmarks/silent_sink.py [--silence 35] [--awake]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.system.test_browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

PAGE = """async ({ silence, awake }) => {
    const ctx = new AudioContext({ sampleRate: 24000, latencyHint: 'interactive' });
    const osc = new OscillatorNode(ctx, { frequency: 440 });
    const gain = new GainNode(ctx, { gain: 0 });
    osc.connect(gain).connect(ctx.destination);
    osc.start();
    if (awake) {
        const keep = new ConstantSourceNode(ctx, { offset: 2 ** -26 });
        keep.connect(ctx.destination);
        keep.start();
    }
    await ctx.resume();
    const rows = [], t0 = performance.now();
    await new Promise((done) => {
        const every = setInterval(() => {
            const ts = ctx.getOutputTimestamp(), now = performance.now();
            if (ts.contextTime > 0) rows.push([(now - t0) / 1000, ts.performanceTime / 1000 - ts.contextTime]);
            if (now - t0 > silence * 1000) gain.gain.value = 0.1;
            if (now - t0 > silence * 1000 + 3000) { clearInterval(every); done(); }
        }, 20);
    });
    return rows;
}"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--silence", type=float, default=35.0, help="seconds of exact zeros before the tone")
    parser.add_argument("--awake", action="store_true", help="play the kiosk's KEEP_AWAKE constant too")
    args = parser.parse_args()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        rows = page.evaluate(PAGE, {"silence": args.silence, "awake": args.awake})
        browser.close()
    steps = 0
    for (_, before), (t, after) in zip(rows, rows[1:]):
        if abs(after - before) > 0.002:
            steps += 1
            print(f"at {t:6.2f} s: output timestamps step {(after - before) * 1000:+.1f} ms")
    print(f"{len(rows)} readings, {steps} steps over 2 ms; silence {args.silence:g} s, then a tone"
          f"{', kept awake' if args.awake else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
