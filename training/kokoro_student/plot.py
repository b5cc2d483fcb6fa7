"""The training run's loss curve as a PNG (docs/screenshots/student-loss.png), from the
``loss.csv`` that ``train`` writes: total and each part, smoothed over 50 steps.

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

    rows = np.loadtxt(csv, delimiter=",", ndmin=2)
    # A resumed run repeats the steps after its checkpoint: the later rows are the ones kept.
    _, last = np.unique(rows[::-1, 0], return_index=True)
    rows = rows[::-1][last]
    step, when = rows[:, 0], rows[:, 1]
    gaps = np.diff(when)
    hours = float(gaps[(gaps > 0) & (gaps < 60)].sum()) / 3600  # training time, pauses left out
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    kernel = np.ones(50) / 50
    for col, label in ((2, "total"), (3, "spectral convergence"), (4, "log magnitude (5 resolutions)"), (5, "log mel")):
        smooth = np.convolve(rows[:, col], kernel, mode="valid") if len(rows) > 50 else rows[:, col]
        ax.plot(step[len(step) - len(smooth) :], smooth, label=label)
    ax.set_xlabel(f"step (batch 8 x 1.2 s crops; {hours:.1f} h of training, pauses left out)")
    ax.set_ylabel("loss (50-step mean)")
    ax.set_title("Kokoro student: training loss against the teacher's audio")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png)
    print(png)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
