"""The training run's loss curve as a PNG (docs/screenshots/student-loss.png), from the
``loss.csv`` that ``train`` writes: the reconstruction loss and each part, smoothed over
50 steps, and for a ``--gan`` run the discriminators' loss and the student's adversarial
and feature-matching terms in a second panel.

    python -m training.kokoro_student.plot OUT_DIR/loss.csv docs/screenshots/student-loss.png
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def main(csv: Path, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = np.genfromtxt(csv, delimiter=",", ndmin=2, invalid_raise=False)
    # A resumed run repeats the steps after its checkpoint: the later rows are the ones kept.
    _, last = np.unique(rows[::-1, 0], return_index=True)
    rows = rows[::-1][last]
    step, when = rows[:, 0], rows[:, 1]
    gaps = np.diff(when)
    hours = float(gaps[(gaps > 0) & (gaps < 60)].sum()) / 3600  # training time, pauses left out
    gan = rows.shape[1] >= 10
    fig, axes = plt.subplots(2 if gan else 1, 1, figsize=(8, 7.5 if gan else 4.5), dpi=100, sharex=True, squeeze=False)
    kernel = np.ones(50) / 50

    def draw(ax, columns) -> None:
        for col, label in columns:
            smooth = np.convolve(rows[:, col], kernel, mode="valid") if len(rows) > 50 else rows[:, col]
            ax.plot(step[len(step) - len(smooth) :], smooth, label=label)
        ax.set_ylabel("loss (50-step mean)")
        ax.grid(alpha=0.3)
        ax.legend()

    draw(axes[0, 0], ((2, "reconstruction (the sum)"), (3, "spectral convergence"), (4, "log magnitude (5 resolutions)"), (5, "log mel")))
    axes[0, 0].set_title("Kokoro student: training loss against the teacher's audio")
    if gan:
        draw(axes[1, 0], ((7, "discriminators"), (8, "adversarial (student)"), (9, "feature matching")))
    axes[-1, 0].set_xlabel(f"step ({hours:.1f} h of training, pauses left out)")
    fig.tight_layout()
    fig.savefig(png)
    print(png)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
