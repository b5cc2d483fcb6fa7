#!/usr/bin/env python3
"""What each part of rtts costs in resident memory, measured in the real inference process.

    python3 benchmarks/memory_parts.py [--json FILE] [--before DIR] [--runs] [--generator G]

(``--runs`` also measures what each Kokoro run and each Hibari unit adds by its length,
and the anonymous memory Kokoro holds with each generator and what opening the other adds.)

Each part is loaded in a fresh inference process (``rtts.host.Host``, as the server
starts it) and the child's RSS is read before and after, so a part's figure does not
depend on what was loaded first; the parts the memory budget knows only by its priors
until they are loaded (Hibari, the zh and ja front ends) also print the anonymous memory
they add, at the load and after a first use. Then the engines are loaded together, and the child
runs the longest requests the server allows (5,000 characters of Mandarin and of
Japanese, 5,000 of English), unit by unit as the inference thread would, and its peak
RSS (the kernel's high-water mark, VmHWM, reset before each request) and its RSS after
are reported. The server process itself (``rtts serve`` with nothing loaded) is
measured too. ``--before DIR`` runs the same script against another checkout, one
after the other, so the two builds meet the same host.

The front ends are measured as the engines load them, over the compact tables in the
cache directory (``rtts.g2p.compact``, built before anything is timed), and once more
over the packages' own tables, in a checkout that has the compact ones (Hibari's own
G2P is what ``--before`` a checkout without them measures). Load times are
wall-clock on whatever else the machine runs: read them as rough. ``--generator`` is
``rtts serve --generator``: which waveform generator Kokoro runs with (its runs' memory
differs by generator).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# The checkout measured: this one, or the one ``--before`` names (the inner run's cwd).
ROOT = Path(os.environ.get("RTTS_MEASURED_ROOT", Path(__file__).resolve().parent.parent))
MB = 1024 * 1024
LONG = 5000
# Kokoro's waveform generator in the measured run (``--generator``; the server's default).
GENERATOR = os.environ.get("RTTS_MEASURED_GENERATOR", "auto")


def _status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


class AnonPeak:
    """The peak of ``pid``'s memory as the memory budget counts it (``memory.anonymous_bytes``)
    while it lasts, read every 5 ms: VmHWM counts the file pages of mapped dictionaries too
    (the Japanese front end's Sudachi dictionary: ~120 MB after one long Japanese unit),
    which the kernel can take back; anonymous memory is what a cap cannot reclaim."""

    def __init__(self, pid: int) -> None:
        from rtts.host.memory import anonymous_bytes

        self._read = lambda: anonymous_bytes(pid)
        self.before = self.peak = self._read()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._read())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def _reset_peak(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as f:
        f.write("5")  # resets VmHWM to the current RSS


# A first use of a part, after its load: sentences of the benchmarks' own (listeners.py),
# with a word no lexicon has for Hibari's net and a date for the Mandarin normalizer.
FIRST_USE = {
    "en": "Zorblatt from Quixotica arrived. The morning train to Boston leaves from platform four at ten thirty.",
    "zh": "请注意，本次列车即将到达杭州东站。2026年12月5日。",
    "ja": "まもなく一番線に電車がまいります。危ないですから黄色い線までお下がりください。",
}


def _speak(registry, voice: str, lang: str) -> None:  # type: ignore[no-untyped-def]
    info = registry.get(voice)
    for _ in registry.engine_for(info).synthesize(FIRST_USE[lang], info, lang, 1.0, 10.0):
        pass


def _registry(generator: str = GENERATOR):  # type: ignore[no-untyped-def]
    """The measured checkout's voices and their inference process, not yet started."""
    sys.path.insert(0, str(ROOT))
    from rtts.engines.voices import VoiceRegistry

    registry = VoiceRegistry.discover(None, _cache(), 2, generator=generator)
    assert registry.host is not None
    return registry, registry.host


def _cache() -> Path:
    return Path(os.environ.get("RTTS_CACHE_DIR", Path.home() / ".cache" / "rtts"))


def _long_text(lang: str) -> str:
    """The longest request, with every unit as long as units get (hostile.py's worst case)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import hostile

    return hostile.longest_units(lang, LONG)


def measure() -> dict:
    sys.path.insert(0, str(ROOT))
    cache = _cache()
    out: dict = {"parts_mb": {}, "requests": {}}
    # The compact G2P tables, where this checkout has them: built now, not inside a timed load.
    compact = (ROOT / "rtts" / "g2p" / "compact.py").is_file()
    if compact:
        from rtts.g2p.compact import build_all

        build_all(cache)
    kept = (str(cache),) if compact else ()  # kokoro.g2p's cache-dir argument

    def fresh():
        """A registry and its inference process, started by a request that loads nothing
        (an unknown op fails in it)."""
        registry, host = _registry()
        try:
            host.call("rtts-no-such-op")
        except Exception:
            pass
        return registry, host

    def child_rss(host) -> int:
        return host.resident_bytes()

    registry, host = fresh()
    base = child_rss(host)
    out["parts_mb"]["inference process, nothing loaded"] = round(base / MB, 1)
    host.stop()

    def part(name: str, action, then=None) -> None:
        """What ``action`` adds (RSS, and anonymous memory, the budget's measure); with
        ``then``, the anonymous memory it holds after that too (a first use)."""
        registry, host = fresh()
        before, anon = child_rss(host), host.anonymous_bytes()
        t0 = time.perf_counter()
        action(registry, host)
        took = time.perf_counter() - t0
        out["parts_mb"][name] = round((child_rss(host) - before) / MB, 1)
        out.setdefault("load_s", {})[name] = round(took, 2)
        anon_mb = [round((host.anonymous_bytes() - anon) / MB, 1)]
        if then is not None:
            then(registry, host)
            anon_mb.append(round((host.anonymous_bytes() - anon) / MB, 1))
        out.setdefault("parts_anon_mb", {})[name] = anon_mb
        host.stop()

    def engine(model):
        return lambda registry, host: registry.engines[model].load()

    part("Piper en_US-joe-medium (sessions)", engine("piper/en_US-joe-medium"))
    part("Kokoro (predictor + decoder sessions)", engine("kokoro"))
    # The parts the memory budget knows by prior figures until loaded (``Memory``: the
    # front ends' for good, Hibari's as a floor under what its load adds): their anonymous
    # memory after a first use too, an unknown word and a sentence for Hibari.
    part("Hibari (session, lexicons, DSP)", engine("hibari"), then=lambda r, h: _speak(r, "hibari/heart", "en"))
    part("zh front end (jieba, pypinyin, misaki)", lambda r, h: h.call("kokoro.g2p", "zh", "你好", *kept),
         then=lambda r, h: h.call("kokoro.g2p", "zh", FIRST_USE["zh"], *kept))
    part("ja front end (OpenJTalk dictionary)", lambda r, h: h.call("kokoro.g2p", "ja", "こんにちは", *kept),
         then=lambda r, h: h.call("kokoro.g2p", "ja", FIRST_USE["ja"], *kept))
    if compact:
        part("zh front end, the packages' own tables", lambda r, h: h.call("kokoro.g2p", "zh", "你好"))
        part("ja front end, the packages' own tables", lambda r, h: h.call("kokoro.g2p", "ja", "こんにちは"))

    registry, host = fresh()
    for model in ("piper/en_US-joe-medium", "kokoro", "hibari"):
        registry.engines[model].load()
    host.call("kokoro.g2p", "zh", "你好", *kept)
    host.call("kokoro.g2p", "ja", "こんにちは", *kept)
    out["all loaded_mb"] = round(child_rss(host) / MB, 1)
    from rtts.text.split import split_units

    for lang, voice in (("zh", "kokoro/zf_xiaoxiao"), ("ja", "kokoro/jf_alpha"), ("en", "hibari/heart"),
                        ("en (Piper)", "piper/en_US-joe-medium"), ("en (Kokoro)", "kokoro/af_heart")):
        code = lang.split()[0]
        info = registry.get(voice)
        eng = registry.engine_for(info)
        text = _long_text(code)
        pid = host.pid
        assert pid is not None
        _reset_peak(pid)
        before = child_rss(host)
        anon = AnonPeak(pid)
        t0 = time.perf_counter()
        audio_s = 0.0
        for unit in split_units(text):
            for chunk in eng.synthesize(unit.text, info, code, 1.0, 10.0):
                audio_s += len(chunk) / info.native_rate
        out["requests"][f"{lang} {len(text)} chars"] = {
            "before_mb": round(before / MB, 1),
            "peak_mb": round(_status(pid, "VmHWM") / MB, 1),
            "anon_peak_mb": round(anon.stop() / MB, 1),
            "anon_before_mb": round(anon.before / MB, 1),
            "after_mb": round(child_rss(host) / MB, 1),
            # Of it, file pages (the mapped dictionaries: reclaimable, not in the budget).
            "after_file_mb": round(_status(pid, "RssFile") / MB, 1),
            "audio_s": round(audio_s, 1),
            "compute_s": round(time.perf_counter() - t0, 1),
        }
    host.stop()
    return out


def kokoro_generators() -> dict:
    """Anonymous memory (what the budget counts) Kokoro's load adds to a fresh inference
    process with each generator the server speaks, and what opening the other one for a
    request adds after a first unit (``KokoroEngine.generator_part``'s figures)."""
    out: dict = {}
    for own, other in (("student", "teacher"), ("teacher", "student")):
        registry, host = _registry(own)
        try:
            host.call("rtts-no-such-op")  # starts the inference process, loading nothing
        except Exception:
            pass
        engine = registry.engines["kokoro"]
        before = host.anonymous_bytes()
        engine.load()
        loaded = host.anonymous_bytes()
        info = registry.get("kokoro/zf_xiaoxiao")
        for _ in engine.synthesize("你好。", info, "zh", 1.0):
            pass
        ran = host.anonymous_bytes()
        engine._open_speaker("zh", other)
        out[own] = {"load_mb": round((loaded - before) / MB, 1),
                    f"{other}_opened_mb": round((host.anonymous_bytes() - ran) / MB, 1)}
        host.stop()
    return out


def kokoro_runs() -> dict:
    """What one Kokoro run adds at its peak, by its length in phonemes, per language:
    the figures behind kokoro.RUN_MB_PER_AUDIO_S (runs cut from the longest units)."""
    registry, host = _registry()
    engine = registry.engines["kokoro"]
    engine.load()
    out: dict = {}
    for lang, style in (("zh", "zf_xiaoxiao"), ("ja", "jf_alpha"), ("en", "af_heart")):
        info = registry.get(f"kokoro/{style}")
        phonemes = engine.phonemize(_long_text(lang)[:600], info, lang).replace(" ", "")
        for tokens in (32, 64, 128, 256, 508):
            pid = host.pid
            assert pid is not None
            _reset_peak(pid)
            before = host.resident_bytes()
            audio = sum(len(a) for a in engine._generate(phonemes[:tokens], style, 1.0, None, lang)) / 24000
            out.setdefault(lang, []).append({"tokens": tokens, "audio_s": round(audio, 1),
                                             "peak_mb": round((_status(pid, "VmHWM") - before) / MB)})
    host.stop()
    return out


def hibari_units() -> dict:
    """What one Hibari unit adds at its peak (anonymous memory, the budget's measure), by
    its length in characters: its model runs a unit whole, so the figures behind
    ``Memory.unit_run_mb`` in rtts/engines/hibari.py (prefixes of the longest unit the
    splitter makes, after one warm-up sentence)."""
    registry, host = _registry()
    from rtts.text.split import split_units

    _speak(registry, "hibari/heart", "en")
    info = registry.get("hibari/heart")
    engine = registry.engine_for(info)
    longest = max((u.text for u in split_units(_long_text("en"))), key=len)
    out = []
    for chars in (60, 100, 140, 180, 220, len(longest)):
        assert host.pid is not None
        peak = AnonPeak(host.pid)
        for _ in engine.synthesize(longest[:chars], info, "en", 1.0, 10.0):
            pass
        out.append({"chars": chars, "peak_mb": round((peak.stop() - peak.before) / MB, 1)})
    host.stop()
    return out


def server_rss() -> float:
    """RSS of ``rtts serve`` with nothing loaded, after it reports ready."""
    with tempfile.TemporaryDirectory() as models:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rtts", "serve", "--port", "0", "--models-dir", models, "--log-level", "info"],
            cwd=ROOT, stderr=subprocess.PIPE, text=True,
        )
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                if "listening" in line.lower() or "ready" in line.lower():
                    break
            time.sleep(2.0)
            return round(_status(proc.pid, "VmRSS") / MB, 1)
        finally:
            proc.terminate()
            proc.wait(10)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path)
    p.add_argument("--before", type=Path, help="another checkout, measured after this one")
    p.add_argument("--runs", action="store_true", help="also what Kokoro runs of 32-508 phonemes add at their peak")
    from rtts.protocol import GENERATORS

    p.add_argument("--generator", choices=GENERATORS, default="auto",
                   help="Kokoro's waveform generator, as rtts serve --generator")
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.inner:
        result = measure()
        result["server_mb"] = server_rss()
        if os.environ.get("RTTS_MEASURE_RUNS") == "1":
            result["kokoro_runs"] = kokoro_runs()
            result["kokoro_generators"] = kokoro_generators()
            result["hibari_units"] = hibari_units()
        print(json.dumps(result))
        return 0
    results = {}
    for label, root in (("this build", ROOT), *((("before", args.before.resolve()),) if args.before else ())):
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--inner"], cwd=root,
                              env={**os.environ, "PYTHONPATH": str(root), "RTTS_MEASURED_ROOT": str(root),
                                   "RTTS_MEASURE_RUNS": "1" if args.runs and label == "this build" else "0",
                                   "RTTS_MEASURED_GENERATOR": args.generator}, capture_output=True, text=True, check=True)
        results[label] = json.loads(done.stdout.strip().splitlines()[-1])
    for label, r in results.items():
        print(f"## {label}")
        print(f"server process, nothing loaded: {r['server_mb']} MB")
        for name, mb in r["parts_mb"].items():
            anon = r.get("parts_anon_mb", {}).get(name)
            held = f"   anonymous {' -> '.join(f'{a:.1f}' for a in anon)} MB" if anon else ""
            print(f"  {name:45s} {mb:7.1f} MB   load {r.get('load_s', {}).get(name, 0):.2f} s{held}")
        print(f"  all engines and front ends loaded: {r['all loaded_mb']} MB")
        for name, q in r["requests"].items():
            print(f"  {name:28s} before {q['before_mb']:6.1f}  peak {q['peak_mb']:6.1f}  after {q['after_mb']:6.1f} MB"
                  f" (file pages {q.get('after_file_mb', 0):.1f}; anonymous {q.get('anon_before_mb', 0):.1f}"
                  f" -> peak {q.get('anon_peak_mb', 0):.1f})   ({q['audio_s']} s audio in {q['compute_s']} s)")
        for own, figures in r.get("kokoro_generators", {}).items():
            print(f"  Kokoro speaking the {own} (anonymous): " + ", ".join(f"{k} +{v}" for k, v in figures.items()))
        if r.get("hibari_units"):
            print("  Hibari units: " + ", ".join(f"{u['chars']} characters +{u['peak_mb']} MB" for u in r["hibari_units"]))
        for lang, rows in r.get("kokoro_runs", {}).items():
            print(f"  Kokoro {lang} runs: " + ", ".join(
                f"{row['tokens']} phonemes ({row['audio_s']} s) +{row['peak_mb']} MB" for row in rows))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
