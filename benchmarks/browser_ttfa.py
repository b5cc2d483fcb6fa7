"""Time to first audio as the browser page sees it, next to the server's own ``ttfa_ms``.

Loads the real page (static/index.html) in Debian's headless Chromium from a running
rtts, warms each voice up with one utterance, then speaks each sentence once per voice,
one at a time, and prints per utterance:

- page TTFA: from the page handing `speak` to its WebSocket to the first `audio` frame
  arriving (measured in the page with performance.now());
- page first sound: to the AudioWorklet starting to play that frame (includes the
  60 ms jitter buffer);
- server ttfa_ms: from `end.stats`, request received to first frame sent.

    python3 -m rtts serve --port 8700 --idle-unload 0 &
    python3 benchmarks/browser_ttfa.py --url http://127.0.0.1:8700 \\
        --voices piper/en_US-joe-medium,kokoro/jf_alpha [--stops 6]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from playwright.sync_api import Page, sync_playwright

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--autoplay-policy=no-user-gesture-required",
]
SENTENCES = [
    "The 10:30 train to Boston leaves from platform 4.",
    "Please keep your belongings with you at all times.",
    "Hello! How are you today?",
    "The museum closes at five o'clock this evening, so plan your visit accordingly.",
    "Attention please, the next bus to the airport has been delayed by ten minutes.",
    "Thank you for waiting.",
]


def speak(page: Page, voice: str, text: str) -> dict:  # type: ignore[type-arg]
    before = page.evaluate("[window.rtts.stats.underruns, window.rtts.stats.audibleUnderruns]")
    utt = page.evaluate(
        "([voice, text]) => { window.rtts.configure({voice}); return window.rtts.speak(text); }", [voice, text]
    )
    page.wait_for_function(
        """id => { const u = window.rtts.stats.utterances[id];
                   return u && u.reason && u.played >= u.received && window.rtts.stats.bufferedMs === 0; }""",
        arg=utt,
        timeout=120_000,
    )
    rec = page.evaluate("id => window.rtts.stats.utterances[id]", utt)
    after = page.evaluate("[window.rtts.stats.underruns, window.rtts.stats.audibleUnderruns]")
    rec["underruns"] = f"{after[0] - before[0]} ({after[1] - before[1]} audible)"
    return rec  # type: ignore[no-any-return]


def stop_latency(page: Page, voice: str, rounds: int) -> list[tuple[float, str]]:
    """Stop one second into a long utterance: milliseconds until the worklet's output
    is silent (as the page measures it), and the server's `end` reason."""
    out = []
    for k in range(rounds):
        text = f"Round {k}. " + "This long sentence keeps going for a while so that Stop has something to cut. " * 4
        utt = page.evaluate(
            "([voice, text]) => { window.rtts.configure({voice}); return window.rtts.speak(text); }", [voice, text]
        )
        page.wait_for_function(
            "id => (window.rtts.stats.utterances[id] || {}).played > window.rtts.stats.sampleRate",
            arg=utt, timeout=120_000,
        )
        ms = page.evaluate("window.rtts.stop()")
        page.wait_for_function("id => window.rtts.stats.utterances[id].reason", arg=utt, timeout=60_000)
        out.append((ms, page.evaluate("id => window.rtts.stats.utterances[id].reason", utt)))
        page.wait_for_timeout(300)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8765", help="the rtts HTTP base URL")
    ap.add_argument("--voices", default="piper/en_US-joe-medium")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--stops", type=int, default=0, help="also time this many Stops (first voice)")
    args = ap.parse_args()

    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(args.url + "/")
        page.wait_for_function("window.rtts && window.rtts.stats.state === 'ready'", timeout=60_000)
        for voice in args.voices.split(","):
            speak(page, voice, "Warming up.")  # the model load is not what we measure
            for text in SENTENCES:
                u = speak(page, voice, text)
                rows.append((voice, text, u["ttfaMs"], u["firstSoundMs"], u["serverTtfaMs"],
                             u["received"] / u["sent"], u["underruns"], u["stats"]["rtf"]))
        stops = stop_latency(page, args.voices.split(",")[0], args.stops) if args.stops else []
        browser.close()

    print("| voice | text | page TTFA ms | page first sound ms | server ttfa_ms | page − server ms "
          "| worklet got | underruns | rtf |")
    print("|---|---|---|---|---|---|---|---|---|")
    for voice, text, ttfa, sound, server, got, underruns, rtf in rows:
        short = text if len(text) <= 40 else text[:37] + "…"
        print(f"| {voice} | {short} | {ttfa:.1f} | {sound:.1f} | {server:.1f} | {ttfa - server:.1f} "
              f"| {got:.1%} | {underruns} | {rtf:.2f} |")
    print()
    for voice in args.voices.split(","):
        mine = [r for r in rows if r[0] == voice]
        med = [statistics.median(r[i] for r in mine) for i in (2, 3, 4)]
        print(f"{voice}: median page TTFA {med[0]:.1f} ms, first sound {med[1]:.1f} ms, "
              f"server ttfa_ms {med[2]:.1f} ms (page − server {med[0] - med[2]:.1f} ms)")
    if stops:
        ms = sorted(m for m, _ in stops)
        print(f"Stop → silence over {len(ms)} stops: {', '.join(f'{m:.1f}' for m, _ in stops)} ms "
              f"(median {statistics.median(ms):.1f}, max {ms[-1]:.1f}); server end reasons: "
              f"{', '.join(sorted({r for _, r in stops}))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
