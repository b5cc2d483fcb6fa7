#!/usr/bin/env python3
"""Where Kokoro's quick-start window would cut a first run inside one written word's
reading, and what those first runs sound like, one build at a time.

    python3 benchmarks/reading_cuts.py [--wavs DIR]
    PYTHONPATH=DIR python3 benchmarks/reading_cuts.py --wavs OTHER   # the build in DIR

A unit's first run is cut within a window (least, least + 8) that grows with the box's
learned cost of a run (``KokoroEngine._first_symbols``). Where no word ends inside the
window and its end is a space inside one written word's reading ("$23.50" read
"twenty-three dollars and fifty cents"), the rule in ``g2p/split.first_words`` decides:
a cut there (up to ce6d0b0) or the unit whole (after). For every sentence of
../shared/tools/sentences-public.json in Mandarin (zf_xiaoxiao) and English (af_heart) and
every least from 8 to 39, this prints the windows where that is so. With ``--wavs`` it
synthesizes each such sentence once with its first such window forced (the engine's own
``_generate``, as a waiting listener gets it) and writes the WAVs and an ``items.json``
for ../shared/tools/asr_score.py and dnsmos_score.py. The windows are found the same way
in both builds (the phonemes and ``inside_words`` did not change), so two runs, this
checkout and the one before under PYTHONPATH, give the same sentences cut both ways.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import soundfile as sf

from rtts.engines.voices import VoiceRegistry
from rtts.g2p.split import first_words
from rtts.g2p.words import inside_words

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = ROOT.parent / "shared" / "tools" / "sentences-public.json"
VOICES = {"zh": "kokoro/zf_xiaoxiao", "en": "kokoro/af_heart"}
WIDTH = 8  # the quick start's window: (least, least + WIDTH), as QUICK_START's (8, 16)
LEASTS = range(8, 40)


def window_ends_in_a_reading(phonemes: str, joined: frozenset[int], least: int) -> bool:
    """No word end in the window (none ``first_words`` may cut at), and a space inside a
    reading at its end."""
    limit = least + WIDTH
    spaces = [i for i in range(least, min(limit, len(phonemes) - 1) + 1) if phonemes[i] == " " and i not in joined]
    return not spaces and limit < len(phonemes) and phonemes[limit] == " " and limit in joined


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wavs", type=Path, help="synthesize the affected sentences into this folder")
    p.add_argument("--cache", type=Path, default=ROOT / ".pytest-cache-models", help="rtts's model cache")
    args = p.parse_args()
    registry = VoiceRegistry.discover(None, args.cache, threads=2)
    sentences = json.loads(SENTENCES.read_text())
    items, windows, ending = [], 0, 0
    for lang, voice_id in VOICES.items():
        voice = registry.get(voice_id)
        engine = registry.engine_for(voice)
        for n, text in enumerate(sentences[lang]):
            phonemes, words = engine.phonemize_words(text, voice, lang)
            joined = inside_words(words, 0, len(phonemes))
            hits = [least for least in LEASTS if window_ends_in_a_reading(phonemes, joined, least)]
            windows += len(LEASTS)
            ending += len(hits)
            if not hits:
                continue
            least = hits[0]
            head = first_words(phonemes, least + WIDTH, least, joined)[0]
            print(f"{lang} {text!r}: windows from least {hits}; first run at least {least}: {len(head)} of "
                  f"{len(phonemes)} phonemes")
            if args.wavs is not None:
                chunks = engine._generate(phonemes, voice.speaker, 1.0, (least, least + WIDTH), lang, None, 0.0, words)
                runs = [c for c in chunks if isinstance(c, np.ndarray)]
                args.wavs.mkdir(parents=True, exist_ok=True)
                wav = args.wavs / f"{lang}-{n}.wav"
                sf.write(wav, np.concatenate(runs), 24000)
                print(f"  runs of {', '.join(f'{r.size / 24000:.2f}' for r in runs)} s -> {wav}")
                items.append({"lang": lang, "text": text, "wav": str(wav)})
    print(f"{ending} of {windows} windows end inside a reading with no word end in them")
    if args.wavs is not None:
        (args.wavs / "items.json").write_text(json.dumps(items, ensure_ascii=False, indent=1))
        print(f"score: asr_score.py {args.wavs / 'items.json'}; dnsmos_score.py {args.wavs / 'items.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
