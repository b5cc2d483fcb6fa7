"""Fit the student (``model``) to the teacher data (``teacher``): multi-resolution STFT
loss (spectral convergence + log magnitude) and a log-mel L1 between the student's audio,
made through the differentiable ``dsp_synth``, and the teacher's, on random crops.

Checkpointed every ``--save-every`` steps and resumed from the checkpoint when it
exists; shards written since the last look are picked up as training goes. Each step's
loss goes to ``OUT/loss.csv``.

    python -m training.kokoro_student.train DATA_DIR OUT_DIR [--steps N] [--threads 1]
    python -m training.kokoro_student.train DATA_DIR OUT_DIR --init models/kokoro-student.onnx  # go on from the shipped weights
    python -m training.kokoro_student.train DATA_DIR OUT_DIR --gan --init models/kokoro-student.onnx  # the adversarial fine-tune
    python -m training.kokoro_student.train --smoke [--gan]  # a few steps on made-up data

With ``--gan`` the same reconstruction loss, weighted by ``--rec-weight``, is joined by
``adversarial``'s discriminators (least squares, feature matching ×2), whose weight ramps
up over the first ``--gan-ramp`` steps of the run so that the untrained discriminators'
first opinions do not knock the student off what it has learnt.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from training.kokoro_student.model import HOP, Student, dsp_synth, windows

RESOLUTIONS = ((2048, 512), (1024, 256), (512, 128), (256, 64), (128, 32))


class Data:
    """Every utterance of the shards found so far, held in memory (float16 inputs)."""

    def __init__(self, folder: Path, crop: int, seed: int = 0) -> None:
        self.folder, self.crop = folder, crop
        self.units: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.langs: list[str] = []
        self.seen: set[str] = set()
        self.held: set[str] = set()
        self.rng = random.Random(seed)
        self.refresh()

    def refresh(self) -> int:
        new = 0
        for path in sorted(self.folder.glob("shard-*.npz")):
            if path.name in self.seen or path.name.endswith(".tmp.npz"):
                continue
            self.seen.add(path.name)
            with np.load(path) as z:
                meta = json.loads(str(z["meta"]))
                for j, m in enumerate(meta):
                    f0 = z[f"f0_{j}"]
                    if f0.size < self.crop:
                        continue
                    self.units.append((z[f"gen_in_{j}"], f0, z[f"style_{j}"], z[f"audio_{j}"]))
                    self.langs.append(m["lang"])
                    new += 1
        return new

    def hours(self) -> float:
        return sum(u[1].size for u in self.units) / 80 / 3600

    def batch(self, size: int) -> tuple[torch.Tensor, ...]:
        from hibari import dsp

        gen, f0s, styles, audios, pulses = [], [], [], [], []
        for _ in range(size):
            gen_in, f0, style, audio = self.units[self.rng.randrange(len(self.units))]
            a = self.rng.randrange(f0.size - self.crop + 1)
            b = a + self.crop
            gen.append(gen_in[:, a:b].astype(np.float32))
            f0s.append(f0[a:b])
            styles.append(style)
            audios.append(audio[a * HOP : b * HOP].astype(np.float32) / 32768)
            pulses.append(dsp.pulses(f0[a:b]))
        return tuple(torch.from_numpy(np.stack(x)) for x in (gen, f0s, styles, audios, pulses))


def stft_mag(x: torch.Tensor, n_fft: int, hop: int) -> torch.Tensor:
    win = torch.hann_window(n_fft, device=x.device)
    return torch.stft(x, n_fft, hop, window=win, return_complex=True).abs().clamp(min=1e-5)


class MelBank:
    def __init__(self, n_fft: int = 1024, mels: int = 80, sr: int = 24000) -> None:
        def hz_to_mel(f: np.ndarray) -> np.ndarray:
            return 2595 * np.log10(1 + f / 700)

        edges = 700 * (10 ** (np.linspace(hz_to_mel(np.array(0.0)), hz_to_mel(np.array(sr / 2)), mels + 2) / 2595) - 1)
        freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
        bank = np.zeros((mels, freqs.size), np.float32)
        for m in range(mels):
            lo, mid, hi = edges[m : m + 3]
            bank[m] = np.clip(np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)), 0, None)
        self.bank = torch.from_numpy(bank)

    def __call__(self, mag: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.clamp(self.bank @ mag, min=1e-5))


def loss_fn(y: torch.Tensor, t: torch.Tensor, mel: MelBank) -> tuple[torch.Tensor, dict[str, float]]:
    sc = lm = torch.zeros(())
    for n_fft, hop in RESOLUTIONS:
        ym, tm = stft_mag(y, n_fft, hop), stft_mag(t, n_fft, hop)
        sc = sc + torch.linalg.norm(tm - ym) / torch.linalg.norm(tm)
        lm = lm + (torch.log(ym) - torch.log(tm)).abs().mean()
    sc, lm = sc / len(RESOLUTIONS), lm / len(RESOLUTIONS)
    mel_l1 = (mel(stft_mag(y, 1024, 256)) - mel(stft_mag(t, 1024, 256))).abs().mean()
    total = sc + lm + mel_l1
    return total, {"sc": float(sc.detach()), "logmag": float(lm.detach()), "mel": float(mel_l1.detach())}


def gan_step(disc, opt_d, y: torch.Tensor, audio: torch.Tensor, rec: torch.Tensor, parts: dict, args, ramp: float, lr: float) -> torch.Tensor:
    """One discriminator update on this batch, then the student's loss: the reconstruction
    weighted, plus the adversarial and feature-matching terms scaled by ``ramp``."""
    from training.kokoro_student.adversarial import disc_loss, gen_losses

    for group in opt_d.param_groups:
        group["lr"] = lr
    real = disc(audio)
    d_loss = disc_loss(real, disc(y.detach()))
    opt_d.zero_grad(set_to_none=True)
    d_loss.backward()
    torch.nn.utils.clip_grad_norm_(disc.parameters(), 10.0)
    opt_d.step()
    # The teacher's features as the discriminators saw them a moment ago: one pass fewer.
    adv, fm = gen_losses(real, disc(y))
    parts |= {"disc": float(d_loss.detach()), "adv": float(adv.detach()), "fm": float(fm.detach())}
    return args.rec_weight * rec + ramp * (adv + 2 * fm)


def smoke_data(folder: Path, units: int = 4, frames: int = 160) -> None:
    """Made-up teacher data in the shard format: enough to run the loop, not to learn."""
    rng = np.random.default_rng(0)
    arrays: dict[str, np.ndarray] = {}
    for j in range(units):
        f0 = np.where(np.arange(frames) % 40 < 30, 120 + 40 * np.sin(np.arange(frames) / 9), 0).astype(np.float32)
        arrays[f"gen_in_{j}"] = rng.standard_normal((512, frames)).astype(np.float16)
        arrays[f"f0_{j}"] = f0
        arrays[f"style_{j}"] = rng.standard_normal(128).astype(np.float32)
        arrays[f"audio_{j}"] = (rng.standard_normal(frames * HOP) * 3000).astype(np.int16)
    arrays["meta"] = np.array(json.dumps([{"lang": "zh", "voice": "smoke"}] * units))
    np.savez(folder / "shard-0000.npz", **arrays)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data", type=Path, nargs="?")
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--crop", type=int, default=96, help="frames (12.5 ms) per crop")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--save-every", type=int, default=200)
    ap.add_argument("--minutes", type=float, default=0, help="stop after this many minutes (0: steps only)")
    ap.add_argument("--init", type=Path, help="start from this ONNX export (from_onnx) when OUT_DIR has no checkpoint")
    ap.add_argument("--smoke", action="store_true", help="3 steps on made-up data in a temporary folder")
    ap.add_argument("--gan", action="store_true", help="fine-tune against discriminators (adversarial.py)")
    ap.add_argument("--rec-weight", type=float, default=15.0, help="the reconstruction loss's weight with --gan")
    ap.add_argument("--gan-ramp", type=int, default=400, help="steps over which the adversarial terms ramp up")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.smoke:
        tmp = Path(tempfile.mkdtemp(prefix="student-smoke-"))
        smoke_data(tmp)
        args.data, args.out, args.steps, args.batch, args.save_every = tmp, tmp / "out", 3, 2, 2
    assert args.data is not None and args.out is not None, "DATA_DIR and OUT_DIR, or --smoke"
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    data = Data(args.data, args.crop)
    model = Student()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.8, 0.99), weight_decay=0.01)
    disc = opt_d = None
    if args.gan:
        from training.kokoro_student.adversarial import Discriminators

        disc = Discriminators()
        opt_d = torch.optim.AdamW(disc.parameters(), lr=args.lr, betas=(0.8, 0.99), weight_decay=0.01)
    ckpt = args.out / "student.pt"
    step = gan_start = 0
    if ckpt.exists():
        state = torch.load(ckpt, map_location="cpu")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
        if disc is not None and "disc" in state:
            disc.load_state_dict(state["disc"])
            opt_d.load_state_dict(state["opt_d"])
            gan_start = state["gan_start"]
        else:
            gan_start = step
        print(f"resumed at step {step}", flush=True)
    elif args.init:
        from training.kokoro_student.from_onnx import state_dict

        model.load_state_dict(state_dict(args.init))
        print(f"started from {args.init}", flush=True)
    win, win_src = windows()
    mel = MelBank()
    log = (args.out / "loss.csv").open("a")
    started = time.time()
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters; {len(data.units)} units, {data.hours():.2f} h", flush=True)
    while step < args.steps:
        if step % 100 == 0 and data.refresh():
            print(f"step {step}: {len(data.units)} units, {data.hours():.2f} h of teacher audio", flush=True)
        # A short warm-up, then the rate halves every 6,000 steps.
        lr = args.lr * min(1.0, (step + 1) / 300) * 0.5 ** (step / 6000)
        for group in opt.param_groups:
            group["lr"] = lr
        gen_in, f0, style, audio, pulses = data.batch(args.batch)
        y = dsp_synth(model(gen_in, f0, style), pulses, win, win_src)
        loss, parts = loss_fn(y, audio, mel)
        parts["rec"] = float(loss.detach())  # the column plot.py draws, comparable with or without --gan
        if disc is not None:
            loss = gan_step(disc, opt_d, y, audio, loss, parts, args, min(1.0, (step - gan_start + 1) / args.gan_ramp), lr)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        extra = "".join(f",{parts[k]:.4f}" for k in ("disc", "adv", "fm") if k in parts)
        log.write(f"{step},{time.time():.1f},{parts['rec']:.4f},{parts['sc']:.4f},{parts['logmag']:.4f},{parts['mel']:.4f},{lr:.6f}{extra}\n")
        if step % 20 == 0:
            log.flush()
            print(f"step {step} loss {float(loss.detach()):.3f} {parts} {(time.time() - started) / 60:.1f} min", flush=True)
        out_of_time = args.minutes and time.time() - started > args.minutes * 60
        if step % args.save_every == 0 or step == args.steps or out_of_time:
            state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step}
            if disc is not None:
                state |= {"disc": disc.state_dict(), "opt_d": opt_d.state_dict(), "gan_start": gan_start}
            torch.save(state, ckpt.with_suffix(".tmp"))
            ckpt.with_suffix(".tmp").rename(ckpt)
        if out_of_time:
            break
    log.close()
    print(f"stopped at step {step}", flush=True)


if __name__ == "__main__":
    main()
