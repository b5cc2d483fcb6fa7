"""The student: Kokoro's generator input (512 channels at 80 frames a second), the
teacher's F0 and the decoder's half of the style in; Hibari's five spectra per frame out
(``hibari.dsp``: harmonic gain and phase turn, noise gain, a free-phase part), which
``dsp_synth`` here (training) or ``hibari.dsp`` (rtts, at run time) turn into audio.

A Vocos-style stack: one input convolution, the style as a FiLM on its output, ConvNeXt
blocks at 80 fps, one linear head. About 4 M parameters and 0.3 GMAC per second of
audio, against the teacher generator's ~24 (docs/research: distillation notes)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

BINS = 601  # n_fft 1200 / 2 + 1
N_FFT, HOP = 1200, 300
PARTS = 5  # lh, th, ln, lr, phi
F0_REF = 200.0


class Block(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.dw = nn.Conv1d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        self.scale = nn.Parameter(torch.full((dim,), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, C, T]
        y = self.dw(x).transpose(1, 2)
        y = self.down(torch.nn.functional.gelu(self.up(self.norm(y))))
        return x + (self.scale * y).transpose(1, 2)


class Student(nn.Module):
    def __init__(self, dim: int = 256, hidden: int = 768, blocks: int = 6, style: int = 128, features: int = 512) -> None:
        super().__init__()
        self.inp = nn.Conv1d(features + 2, dim, 5, padding=2)
        self.film = nn.Linear(style, 2 * dim)
        self.blocks = nn.ModuleList(Block(dim, hidden) for _ in range(blocks))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, PARTS * BINS)
        with torch.no_grad():  # start near a plausible spectrum: some harmonics, quiet noise, no free part
            self.head.weight.mul_(0.1)
            bias = self.head.bias.view(PARTS, BINS)
            bias.zero_()
            bias[0] = -3.0
            bias[2] = -6.0
            bias[3] = -9.0

    def forward(self, gen_in: torch.Tensor, f0: torch.Tensor, style: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """gen_in [B, 512, T], f0 [B, T] (Hz, 0 unvoiced), style [B, 128] -> five [B, 601, T]."""
        voiced = (f0 > 40.0).to(gen_in.dtype)
        pitch = torch.log2(torch.clamp(f0, min=40.0) / F0_REF) * voiced
        x = self.inp(torch.cat([gen_in, pitch[:, None], voiced[:, None]], 1))
        gamma, beta = self.film(style).chunk(2, dim=1)
        x = x * (1 + gamma[:, :, None]) + beta[:, :, None]
        for block in self.blocks:
            x = block(x)
        y = self.head(self.norm(x.transpose(1, 2))).transpose(1, 2)  # [B, 5*601, T]
        lh, th, ln, lr, phi = y.split(BINS, dim=1)
        return lh, th, ln, lr, phi


def windows(device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """hibari.dsp's periodic Hann, and the same scaled so a unit cosine's bin is its amplitude."""
    win = torch.from_numpy((0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)).astype(np.float32))
    return win.to(device), (win / (N_FFT / 4)).to(device)


def dsp_synth(parts: tuple[torch.Tensor, ...], pulses: torch.Tensor, win: torch.Tensor, win_src: torch.Tensor) -> torch.Tensor:
    """hibari.dsp.synth, differentiable: parts five [B, 601, T], pulses [B, T*300] -> [B, T*300]."""
    lh, th, ln, lr, phi = parts
    frames = lh.shape[-1]
    src = torch.stft(pulses, N_FFT, HOP, window=win_src, center=True, pad_mode="reflect", return_complex=True)[..., :frames]
    ex = lambda v: torch.exp(torch.clamp(v, max=7.0))
    harmonic = src * torch.polar(ex(lh), math.pi * torch.tanh(th))
    noise = torch.complex(torch.randn_like(ln), torch.randn_like(ln)) * ex(ln)
    free = torch.polar(ex(lr), phi)
    return torch.istft(harmonic + noise + free, N_FFT, HOP, window=win, center=True, length=frames * HOP)
