"""Kokoro's decoder with statically quantized convolutions.

The int8 export quantizes every convolution dynamically: DynamicQuantizeLinear measures
each activation at run time, and ConvInteger multiplies uint8 activations by uint8
weights (with a zero point), a slow kernel on x86; ConvInteger was 57 % of Kokoro's
time. With the activations' ranges known in advance (calibrated once on real sentences,
``models/calibrate_kokoro.py``, kept in ``kokoro_ranges.json`` beside this file), ONNX
Runtime's own quantizer turns a convolution into QuantizeLinear -> Conv(int8 weights,
per output channel) -> DequantizeLinear, which ONNX Runtime runs as one QLinearConv:
about 3x faster per convolution (../shared/research/bench/conv_kernels.py).

Not every convolution: a static one also rounds its *output* to 8 bits over a fixed
range, and that is heard in the generator's last, sample-rate stage (resblocks.3-5,
noise_res.1: DNSMOS P.808 -0.32 on the public sentences) and in the F0 and energy
convolutions (the pitch itself, 8 bits over the calibrated range: SNR against the float
model fell from 15 to 0 dB). Those stay dynamic; see docs/benchmarks.md.

Run by the Kokoro cut's child process (``kokoro_cut``), so the server never imports
``onnx`` or the quantizer; the cut's recipe covers this code, the ranges file and the
onnx and onnxruntime versions.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rtts.engines.conv_gemm import QuantizedConv, rewrite

if TYPE_CHECKING:
    import onnx

__all__ = ["RANGES", "STATIC", "calibrate", "float_convs", "static_convs"]

RANGES = Path(__file__).with_name("kokoro_ranges.json")
# The convolutions made static (names of the export's ConvInteger nodes): the decoder's
# frame-rate blocks and the generator's first (256-channel) stage.
STATIC = re.compile(r"/decoder/decoder/(encode|decode\.\d|asr_res)/|/generator/(resblocks\.[012]|noise_res\.0)/")


def static_convs(decoder: onnx.ModelProto, ranges: Path = RANGES) -> tuple[onnx.ModelProto, list[str]]:
    """``decoder`` with the convolutions ``STATIC`` names quantized statically over the
    calibrated ``ranges``; and their names."""
    import onnx

    names = float_convs(decoder, _wanted)
    with tempfile.TemporaryDirectory(prefix="rtts-kokoro-quant-") as tmp:
        out = Path(tmp) / "decoder.onnx"
        _quantize(decoder, out, names, ranges, None)
        return onnx.load(str(out)), names


def calibrate(decoder: onnx.ModelProto, feeds: Iterable[dict[str, np.ndarray]], ranges: Path) -> list[str]:
    """Measure the ranges of the ``STATIC`` convolutions' inputs and outputs over the
    decoder's inputs ``feeds`` (of real sentences) and write them to ``ranges``."""
    names = float_convs(decoder, _wanted)
    ranges.unlink(missing_ok=True)  # the quantizer would read it instead of calibrating
    with tempfile.TemporaryDirectory(prefix="rtts-kokoro-quant-") as tmp:
        _quantize(decoder, Path(tmp) / "decoder.onnx", names, ranges, _Reader(feeds))
    return names


def _wanted(name: str) -> bool:
    return STATIC.search(name) is not None


def _quantize(model: onnx.ModelProto, out: Path, names: list[str], ranges: Path, reader: object) -> None:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    quantize_static(
        model,
        str(out),
        reader,  # type: ignore[arg-type]
        quant_format=QuantFormat.QDQ,  # fused into QLinearConv when the session is made
        op_types_to_quantize=["Conv"],
        nodes_to_quantize=names,
        per_channel=True,
        # uint8 activations, int8 weights: the u8s8 kernels (VNNI where the CPU has it).
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax,
        calibration_cache_path=str(ranges),
    )


class _Reader:
    """ONNX Runtime's CalibrationDataReader over decoder inputs."""

    def __init__(self, feeds: Iterable[dict[str, np.ndarray]]) -> None:
        self._feeds = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def float_convs(model: onnx.ModelProto, wanted: Callable[[str], bool] = lambda name: True) -> list[str]:
    """Rewrite the export's dynamically quantized convolutions as float Conv, in place.

    Each ``DynamicQuantizeLinear -> ConvInteger [-> Add(quantized bias)] -> Cast -> Mul(scale)``
    whose ConvInteger's name ``wanted`` accepts becomes one ``Conv(x, w·scale, bias)``
    named like the ConvInteger without its ``_quant`` suffix (weights dequantized once;
    the same values the int8 graph multiplies by). Returns the new nodes' names.
    """
    names: list[str] = []

    def build(qc: QuantizedConv) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]] | None:
        from onnx import helper
        from onnx import numpy_helper as nh

        if not wanted(qc.conv.name):
            return None
        name = qc.conv.name.removesuffix("_quant")
        weights = nh.from_array(((qc.weights.astype(np.float32) - qc.zero) * qc.w_scale).astype(np.float32), name + "/W")
        conv = helper.make_node("Conv", [qc.x, weights.name, *([qc.bias] if qc.bias else [])], [qc.output], name=name)
        conv.attribute.extend(qc.conv.attribute)
        names.append(name)
        return [conv], [weights]

    rewrite(model, build)
    return names
