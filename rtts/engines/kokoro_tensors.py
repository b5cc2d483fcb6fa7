"""Kokoro v1.0's tensors where rtts cuts its graph: the predictor's outputs, the decoder's
inputs. Apart from ``kokoro_cut`` (which needs ``graph_cut``) so that the inference
process can name them without importing the cutting code (``student_work``)."""

from __future__ import annotations

__all__ = ["DURATIONS", "ENERGY", "F0", "FEATURES"]

DURATIONS = "/encoder/Clip_output_0"  # frames per input token, pads included
FEATURES = "/encoder/MatMul_1_output_0"  # 1 x channels x frames
F0 = "/encoder/Reshape_output_0"  # 1 x 2·frames
ENERGY = "/encoder/Reshape_1_output_0"  # 1 x 2·frames
