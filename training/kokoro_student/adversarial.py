"""The adversarial stage (``train --gan``): what a spectral loss alone leaves (smoothed
harmonics, a buzzier pulse source, heard by DNSMOS as "processed") is what a
discriminator sees. HiFi-GAN's multi-period discriminator (the waveform folded by
periods 2, 3, 5, 7, 11: the pulse train's periodicity) and UnivNet's multi-resolution
one (log magnitudes at three STFT sizes), both narrowed to fit a CPU: a fine-tune of the
spectrally trained student, not a GAN from scratch. Least-squares losses and feature
matching, as HiFi-GAN and Vocos train theirs: summed over the discriminators and their
layers, not averaged, so that against the reconstruction loss (weighted 15 here, 45 on a
mel L1 there) they weigh what they weigh in those recipes.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

SLOPE = 0.1


def layers(convs: nn.ModuleList, post: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A discriminator's convolutions in turn: its verdict map, flattened, and every layer's
    output for feature matching."""
    feats = []
    for conv in convs:
        x = nn.functional.leaky_relu(conv(x), SLOPE)
        feats.append(x)
    return post(x).flatten(1), feats


class PeriodDisc(nn.Module):
    def __init__(self, period: int, widths: tuple[int, ...] = (16, 32, 64, 128)) -> None:
        super().__init__()
        self.period = period
        chans = (1, *widths)
        self.convs = nn.ModuleList(weight_norm(nn.Conv2d(a, b, (5, 1), (3, 1), padding=(2, 0))) for a, b in zip(chans, chans[1:]))
        self.convs.append(weight_norm(nn.Conv2d(widths[-1], widths[-1], (5, 1), 1, padding=(2, 0))))
        self.post = weight_norm(nn.Conv2d(widths[-1], 1, (3, 1), 1, padding=(1, 0)))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:  # x [B, T]
        b, t = x.shape
        pad = (-t) % self.period
        x = nn.functional.pad(x, (0, pad), mode="reflect").view(b, 1, (t + pad) // self.period, self.period)
        return layers(self.convs, self.post, x)


class ResolutionDisc(nn.Module):
    def __init__(self, n_fft: int, hop: int, width: int = 16) -> None:
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft), persistent=False)
        self.convs = nn.ModuleList(
            [
                weight_norm(nn.Conv2d(1, width, (3, 9), (1, 2), padding=(1, 4))),
                weight_norm(nn.Conv2d(width, width, (3, 9), (1, 2), padding=(1, 4))),
                weight_norm(nn.Conv2d(width, width, (3, 9), (1, 2), padding=(1, 4))),
                weight_norm(nn.Conv2d(width, width, (3, 3), padding=(1, 1))),
            ]
        )
        self.post = weight_norm(nn.Conv2d(width, 1, (3, 3), padding=(1, 1)))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        spec = torch.stft(x, self.n_fft, self.hop, window=self.window, return_complex=True).abs()
        y = torch.log(spec.clamp(min=1e-5))[:, None].transpose(2, 3)  # [B, 1, frames, bins]
        return layers(self.convs, self.post, y)


class Discriminators(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.discs = nn.ModuleList(
            [*(PeriodDisc(p) for p in (2, 3, 5, 7, 11)), *(ResolutionDisc(n, h) for n, h in ((2048, 512), (1024, 256), (512, 128)))]
        )

    def forward(self, x: torch.Tensor) -> list[tuple[torch.Tensor, list[torch.Tensor]]]:
        return [d(x) for d in self.discs]


def disc_loss(real: list, fake: list) -> torch.Tensor:
    return sum(((1 - r) ** 2).mean() + (f**2).mean() for (r, _), (f, _) in zip(real, fake))


def gen_losses(real: list, fake: list) -> tuple[torch.Tensor, torch.Tensor]:
    """(adversarial, feature matching), summed over the discriminators and their layers."""
    adv = sum(((1 - f) ** 2).mean() for f, _ in fake)
    fm = sum((a.detach() - b).abs().mean() for (_, rf), (_, ff) in zip(real, fake) for a, b in zip(rf, ff))
    return adv, fm
