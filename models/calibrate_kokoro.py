#!/usr/bin/env python3
"""Measure the activation ranges of Kokoro's statically quantized convolutions.

    python3 models/calibrate_kokoro.py [--styles models/kokoro-voices.npz] [--out rtts/engines/kokoro_ranges.json]

Speaks the sentences below (English, Mandarin, Japanese; none of them is in the
intelligibility sets that check the result) in several voices through Kokoro's
predictor, runs its decoder over them with ONNX Runtime's MinMax calibrator, and writes
the ranges of the inputs and outputs of the convolutions ``rtts.engines.kokoro_quant``
makes static. rtts ships that file; the Kokoro cut reads it (``kokoro_cut``), so a
new file is a new cut. A few minutes on 2 cores; it runs the model ~once per sentence.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rtts.engines.kokoro import MAX_TOKENS, KokoroEngine, _load_style  # noqa: E402
from rtts.engines.kokoro_cut import ENERGY, F0, FEATURES, cut_kokoro, drop_pad_frames  # noqa: E402
from rtts.engines.kokoro_quant import RANGES, calibrate  # noqa: E402
from rtts.host.sessions import open_session  # noqa: E402

# (language, sentences); each is spoken in the voices of its language in turn.
SENTENCES = {
    "en": [
        "Could you tell me where the nearest pharmacy is?",
        "We will be landing in about twenty minutes, so please fasten your seat belts.",
        "The library is closed on public holidays.",
        "Thank you so much for coming today!",
        "Is it going to rain this afternoon, or will the sun come out?",
        "Please leave your keys at the front desk when you check out.",
        "Turn the oven down and let it simmer for an hour.",
        "Wow, that was the loudest thunder I have ever heard.",
        "Hello.",
        "The children laughed, sang, and danced until midnight.",
    ],
    "zh": [
        "请问最近的药店在哪里？",
        "我们大约二十分钟后降落，请系好安全带。",
        "图书馆在法定节假日闭馆。",
        "非常感谢你今天能来！",
        "下午会下雨吗，还是会出太阳？",
        "退房时请把钥匙留在前台。",
        "你好。",
        "孩子们又唱又跳，一直玩到半夜。",
    ],
    "ja": [
        "一番近い薬局はどこですか？",
        "あと二十分ほどで着陸しますので、シートベルトをお締めください。",
        "図書館は祝日は休館です。",
        "今日は来てくれて本当にありがとう！",
        "午後は雨が降りますか、それとも晴れますか？",
        "こんにちは。",
        "子供たちは夜中まで歌ったり踊ったりしました。",
    ],
}
# Voices per language: the built-in Japanese ones, and native ones when a style file has them.
VOICES = {
    "en": ["af_heart", "bm_george", "am_michael", "bf_emma", "jf_alpha"],
    "zh": ["zf_xiaoxiao", "zm_yunxi", "zf_xiaoyi", "jm_kumo"],
    "ja": ["jf_alpha", "jm_kumo", "jf_nezumi", "jf_gongitsune"],
}


def decoder_feeds(engine: KokoroEngine, predictor_path: Path, styles: dict[str, np.ndarray]) -> Iterator[dict]:
    predictor = open_session(predictor_path, 2)
    vocab = engine._get_vocab()
    for lang, texts in SENTENCES.items():
        voices = [v for v in VOICES[lang] if v in styles]
        for i, text in enumerate(texts):
            voice = voices[i % len(voices)]
            tokens = [vocab[ch] for ch in engine.phonemize(text, voice, lang)][:MAX_TOKENS]
            style = styles[voice][len(tokens) - 1][np.newaxis, :]
            feeds = {"tokens": np.array([[0, *tokens, 0]]), "style": style, "speed": np.array([1.0], np.float32)}
            durations, features, f0, energy = predictor.run(None, feeds)
            features, f0, energy = drop_pad_frames(durations, features, f0, energy)
            print(f"{lang} {voice}: {text} ({features.shape[-1] / 40:.1f} s)", flush=True)
            yield {FEATURES: features, F0: f0, ENERGY: energy, "style": style}


def main() -> int:
    import onnx

    default_styles = Path(__file__).resolve().parent / "kokoro-voices.npz"
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--styles", type=Path, action="append", help=f"style files to add (default {default_styles} if present)")
    parser.add_argument("--out", type=Path, default=RANGES)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rtts-calibrate-") as tmp:
        engine = KokoroEngine(Path(tmp))
        styles = _load_style(engine._get_pack().voices)
        for path in args.styles or ([default_styles] if default_styles.exists() else []):
            styles.update(_load_style(path))
        predictor, decoder, _ = cut_kokoro(onnx.load(str(engine.model_path())), static=False, as_exported=True)
        predictor_path = Path(tmp) / "predictor.onnx"
        onnx.save(predictor, str(predictor_path))
        names = calibrate(decoder, decoder_feeds(engine, predictor_path, styles), args.out)
    print(f"wrote the ranges of {len(names)} convolutions to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
