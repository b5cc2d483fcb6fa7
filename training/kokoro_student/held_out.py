"""The training loss on teacher shards a run did not train on, for a checkpoint or any
ONNX export of it: how the int8 forms of one set of weights compare, and whether a run
still gains, without Whisper or DNSMOS (benchmarks/student_quality.py is the verdict).

Every utterance is taken whole (no crop) and the noise is seeded, so two models are
scored on exactly the same audio.

    python -m training.kokoro_student.held_out SHARD.npz [SHARD.npz ...] --model A.onnx --model B.pt [--wavs DIR]

With ``--wavs`` the audio is written too, a folder per model and one for the teacher
(DIR/0-A, DIR/1-B, DIR/teacher), each with an items.json giving every file's language,
so that ``../shared/tools/dnsmos_score.py DIR/teacher`` (and each model's folder) prints
its means per language: a quick look at artifacts on unseen units while a run goes on,
with no Kokoro run and no Whisper.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from training.kokoro_student.model import Student, dsp_synth, windows
from training.kokoro_student.train import MelBank, loss_fn


def langs(shards: list[Path]) -> list[str]:
    """Each unit's language, in the order ``units`` gives them."""
    out = []
    for path in shards:
        with np.load(path) as z:
            out.extend(m["lang"] for m in json.loads(str(z["meta"])))
    return out


def write_items(folder: Path, langs: list[str]) -> None:
    """dnsmos_score.py's items.json for a folder of NNN.wav: each file's language."""
    items = [{"lang": lang, "text": "", "wav": str(folder / f"{j:03d}.wav")} for j, lang in enumerate(langs)]
    (folder / "items.json").write_text(json.dumps(items))


def units(shards: list[Path]) -> list[tuple[np.ndarray, ...]]:
    out = []
    for path in shards:
        with np.load(path) as z:
            for j in range(len(json.loads(str(z["meta"])))):
                out.append((z[f"gen_in_{j}"].astype(np.float32), z[f"f0_{j}"], z[f"style_{j}"], z[f"audio_{j}"].astype(np.float32) / 32768))
    return out


def predictor(path: Path):
    """A function (gen_in, f0, style128) -> five spectra, numpy in and out."""
    if path.suffix == ".onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]

        def run(gen_in, f0, style):
            wide = np.zeros((1, 256), np.float32)
            wide[0, :128] = style
            return session.run(None, dict(zip(names, (gen_in[None], f0[None], wide))))

        return run
    model = Student()
    model.load_state_dict(torch.load(path, map_location="cpu")["model"])
    model.eval()

    def run(gen_in, f0, style):
        with torch.no_grad():
            return [t.numpy() for t in model(torch.from_numpy(gen_in[None]), torch.from_numpy(f0[None]), torch.from_numpy(style[None]))]

    return run


def score(path: Path, data: list[tuple[np.ndarray, ...]], wavs: Path | None = None) -> dict[str, float]:
    from hibari import dsp

    run = predictor(path)
    win, win_src = windows()
    mel = MelBank()
    totals: dict[str, float] = {}
    torch.manual_seed(0)
    for gen_in, f0, style, audio in data:
        parts = tuple(torch.from_numpy(np.asarray(p)) for p in run(gen_in, f0, style))
        pulses = torch.from_numpy(dsp.pulses(f0)[None])
        with torch.no_grad():
            y = dsp_synth(parts, pulses, win, win_src)
            total, bits = loss_fn(y, torch.from_numpy(audio[None]), mel)
        if wavs is not None:
            write_wav(wavs / f"{len(list(wavs.glob('*.wav'))):03d}.wav", y[0].numpy())
        for key, value in {"loss": float(total), **bits}.items():
            totals[key] = totals.get(key, 0.0) + value / len(data)
    return totals


def write_wav(path: Path, audio: np.ndarray) -> None:
    import soundfile as sf

    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, np.clip(audio, -1, 1), 24000, subtype="PCM_16")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shards", type=Path, nargs="+")
    ap.add_argument("--model", type=Path, action="append", required=True)
    ap.add_argument("--wavs", type=Path, help="write every unit's audio under this folder")
    args = ap.parse_args()
    data = units(args.shards)
    print(f"{len(data)} utterances, {sum(u[1].size for u in data) / 80 / 60:.1f} min of teacher audio")
    if args.wavs:
        for j, unit in enumerate(data):
            write_wav(args.wavs / "teacher" / f"{j:03d}.wav", unit[3])
        write_items(args.wavs / "teacher", langs(args.shards))
    for k, path in enumerate(args.model):
        folder = args.wavs / f"{k}-{path.stem}" if args.wavs else None
        figures = score(path, data, folder)
        if folder is not None:
            write_items(folder, langs(args.shards))
        print(f"{path}: " + "  ".join(f"{k} {v:.4f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
