"""Kokoro's dynamically quantized convolutions as one integer matrix product each.

The int8 export quantizes every convolution dynamically: ``DynamicQuantizeLinear``
measures the activation at run time, ``ConvInteger`` multiplies the uint8 activation by
uint8 weights with a zero point, and ``[Add(quantized bias)] -> Cast -> Mul(scale)`` turns
the int32 sums back into floats. ONNX Runtime's ConvInteger is its slow path on x86: it
runs uint8 x uint8 products, which the CPU's int8 dot-product instructions (VNNI, or
AVX2's vpmaddubsw) do not take; they take uint8 x *int8*. ConvInteger was 57 % of
Kokoro's time.

Every Kokoro convolution's weights fit int8 once their zero point is taken off (the
export's zero points are 38-88 and no channel strays more than 127 from its own), so
the same integers can go through ``MatMulIntegerToFloat``, which runs uint8 x int8 on
those instructions and scales and adds the bias in the same pass. A 1-D convolution is a
matrix product of the weights with the input's frames gathered side by side ("im2col"):
for output frame t, the K input frames t·stride + k·dilation. Laid out time-major, the
gather is one ``Gather`` of whole rows of the uint8 activation.

Nothing is rounded that the export does not round: the activations are quantized by the
export's own ``DynamicQuantizeLinear``, the weights are its integers, the bias its own
quantized bias; only the float operations' order differs (the largest sample difference
is measured in tests/unit/test_conv_gemm.py and docs/benchmarks.md). About 2x faster
per convolution on this project's 2-core box (``benchmarks/engine_cost.py``).

Where uint8 x int8 is not exact, the weights go in as uint8 instead (the same integers
plus 128, their zero point 128): ONNX Runtime then runs its uint8 x uint8 kernel, as
ConvInteger does, and keeps the fused scale and bias. On x86 without VNNI (AVX2 alone)
uint8 x int8 is vpmaddubsw, whose pairwise sums saturate at 16 bits: with Kokoro's
weights, 255 x 127 x 2 is past 32,767, and tests/unit/test_conv_gemm.py saw outputs off
by up to 70 % on such a box. ``exact_int8()`` says which this machine is.

Run by the Kokoro cut's child process (``kokoro_cut``), so the server never imports ``onnx``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import functools
import platform
from pathlib import Path

import numpy as np

from rtts.engines.graph_edit import splice

if TYPE_CHECKING:
    import onnx

__all__ = ["QuantizedConv", "exact_int8", "gemm_convs", "product_kind", "quantized_convs", "rewrite"]


@functools.lru_cache(maxsize=1)
def exact_int8(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether ONNX Runtime's uint8 x int8 products are exact on this CPU: on x86 only
    with VNNI (vpdpbusd sums into 32 bits); AVX2's vpmaddubsw saturates. Elsewhere (ARM's
    dot products widen) they are."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
        return True
    try:
        flags = cpuinfo.read_text(encoding="ascii", errors="replace")
    except OSError:
        return False  # unknown: the exact form
    return any(f" {flag}" in flags for flag in ("avx512_vnni", "avx_vnni"))


def product_kind() -> str:
    """What a cut made here depends on besides its code: the weights' integer type."""
    return "u8s8" if exact_int8() else "u8u8"


@dataclass(frozen=True)
class QuantizedConv:
    """One ``DynamicQuantizeLinear -> ConvInteger [-> Add] -> Cast -> Mul`` chain of the export."""

    conv: onnx.NodeProto
    x: str  # the float activation that DynamicQuantizeLinear quantizes
    x_scale: str
    x_zero: str
    weights: np.ndarray  # uint8, out x in x kernel
    zero: int  # the weights' zero point
    w_scale: np.ndarray  # float32, the weights' scale
    scale: str  # x_scale · w_scale, what the Mul multiplies by
    bias_q: str | None  # int32 bias in units of ``scale``
    bias: str | None  # the float bias it was made from
    output: str  # the Mul's output: the convolution's float result
    nodes: tuple[onnx.NodeProto, ...]  # ConvInteger to Mul, replaced together


def quantized_convs(graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> Iterator[QuantizedConv]:
    """The dynamically quantized convolutions among ``nodes`` (the graph's, in one list:
    protobuf may give a new Python object for a node at each walk of ``graph.node``),
    as the Kokoro export builds them."""
    from onnx import numpy_helper as nh

    inits = {i.name: i for i in graph.initializer}
    producer = {o: n for n in nodes for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in nodes:
        for name in dict.fromkeys(node.input):  # once per node, even if it takes a tensor twice
            consumers[name].append(node)
    for conv in [n for n in nodes if n.op_type == "ConvInteger"]:
        quantize = producer[conv.input[0]]
        chain, bias_q, bias, node = [conv], None, None, consumers[conv.output[0]][0]
        if node.op_type == "Add":  # the quantized bias: walk back to Div(bias, scale)
            bias_q = next(i for i in node.input if i != conv.output[0])
            back = producer[bias_q]
            while back.op_type != "Div":
                back = producer[back.input[0]]
            bias = back.input[0]
            chain.append(node)
            node = consumers[node.output[0]][0]
        chain.append(node)  # Cast
        mul = consumers[node.output[0]][0]
        chain.append(mul)
        scale = next(i for i in mul.input if i != node.output[0])
        scale_node = producer[scale]
        w_scale = nh.to_array(inits[next(i for i in scale_node.input if i in inits)]).astype(np.float32)
        zero = int(nh.to_array(inits[conv.input[3]])) if len(conv.input) > 3 and conv.input[3] else 0
        yield QuantizedConv(
            conv=conv,
            x=quantize.input[0],
            x_scale=quantize.output[1],
            x_zero=quantize.output[2],
            weights=nh.to_array(inits[conv.input[1]]),
            zero=zero,
            w_scale=w_scale,
            scale=scale,
            bias_q=bias_q,
            bias=bias,
            output=mul.output[0],
            nodes=tuple(chain),
        )


def rewrite(
    model: onnx.ModelProto,
    build: Callable[[QuantizedConv], tuple[list[onnx.NodeProto], list[onnx.TensorProto]] | None],
) -> list[str]:
    """Replace, in place, each quantized convolution for which ``build`` gives new nodes
    (which must compute its ``output``) and their initializers; drop what then feeds
    nothing. Returns the replaced ConvIntegers' names."""
    graph = model.graph
    nodes_before = list(graph.node)
    replace: dict[int, list[onnx.NodeProto]] = {}
    drop: set[int] = set()
    added: list[onnx.TensorProto] = []
    names = []
    for qc in list(quantized_convs(graph, nodes_before)):
        built = build(qc)
        if built is None:
            continue
        nodes, inits = built
        replace[id(qc.nodes[-1])] = nodes  # where the Mul was: its inputs exist by then
        drop.update(id(n) for n in qc.nodes)
        added += inits
        names.append(qc.conv.name)
    splice(graph, nodes_before, replace, drop, added)
    return names


def gemm_convs(
    model: onnx.ModelProto, wanted: Callable[[str], bool] = lambda name: True, signed: bool | None = None
) -> list[str]:
    """Rewrite, in place, the quantized 1-D convolutions ``wanted`` accepts (by
    ConvInteger name) whose weights fit int8 as im2col + ``MatMulIntegerToFloat``; the
    others stay. Returns the rewritten ones' names. ``signed``: int8 weights (uint8 with
    zero point 128 if not); None: as this CPU computes exactly (``exact_int8``)."""
    from onnx import helper

    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    signed = exact_int8() if signed is None else signed
    return rewrite(model, lambda qc: _gemm(qc, signed) if wanted(qc.conv.name) else None)


def _gemm(qc: QuantizedConv, signed: bool = True) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]] | None:
    from onnx import helper
    from onnx import numpy_helper as nh

    attrs = {a.name: helper.get_attribute_value(a) for a in qc.conv.attribute}
    w = qc.weights.astype(np.int16) - qc.zero
    if w.ndim != 3 or attrs.get("group", 1) != 1 or np.abs(w).max() > 127 or qc.w_scale.size != 1:
        return None  # not a 1-D convolution this form computes exactly
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return None
    out_ch, in_ch, kernel = w.shape
    (stride,) = attrs.get("strides", [1])
    (dilation,) = attrs.get("dilations", [1])
    begin, end = attrs.get("pads", [0, 0])
    name = qc.conv.name.removesuffix("_quant") + "/gemm"

    def n(tensor: str) -> str:
        return f"{name}/{tensor}"

    def const(tensor: str, value: np.ndarray) -> str:
        inits.append(nh.from_array(np.asarray(value), n(tensor)))
        return n(tensor)

    inits: list[onnx.TensorProto] = []
    # Rows of the product's right side: kernel tap k's input channels, tap after tap,
    # the order in which the gather lays a frame's K input frames side by side.
    w_rows = np.ascontiguousarray(w.transpose(2, 1, 0).reshape(kernel * in_ch, out_ch))
    weights = const("W", w_rows.astype(np.int8) if signed else (w_rows + 128).astype(np.uint8))
    nodes = [helper.make_node("Transpose", [qc.conv.input[0]], [n("xt")], perm=[0, 2, 1], name=n("Transpose"))]
    rows = n("xt")
    if begin or end:  # padded with the activation's zero point: a real 0, as ConvInteger pads
        pads = const("pads", np.array([0, begin, 0, 0, end, 0], np.int64))
        nodes.append(helper.make_node("Pad", [rows, pads, qc.x_zero], [n("xp")], name=n("Pad")))
        rows = n("xp")
    if kernel > 1 or stride > 1:
        # Output frame t reads input frames t·stride + k·dilation: a Range of starts,
        # plus the taps' offsets, gathered as whole rows of channels.
        span = dilation * (kernel - 1)
        nodes += [
            helper.make_node("Shape", [rows], [n("shape")], start=1, end=2, name=n("Shape")),
            helper.make_node("Sub", [n("shape"), const("span", np.array([span], np.int64))], [n("limit1")], name=n("Sub")),
            helper.make_node("Squeeze", [n("limit1")], [n("limit")], name=n("Squeeze")),
            helper.make_node(
                "Range",
                [const("zero", np.array(0, np.int64)), n("limit"), const("stride", np.array(stride, np.int64))],
                [n("starts")],
                name=n("Range"),
            ),
            helper.make_node("Unsqueeze", [n("starts"), const("axis", np.array([1], np.int64))], [n("starts2")], name=n("Unsqueeze")),
            helper.make_node(
                "Add", [n("starts2"), const("taps", (np.arange(kernel) * dilation)[np.newaxis, :].astype(np.int64))],
                [n("index")], name=n("Add"),
            ),
            helper.make_node("Gather", [rows, n("index")], [n("gathered")], axis=1, name=n("Gather")),
            helper.make_node(
                "Reshape", [n("gathered"), const("cols", np.array([1, -1, kernel * in_ch], np.int64))],
                [n("columns")], name=n("Reshape"),
            ),
        ]
        rows = n("columns")
    w_zero = "" if signed else const("w_zero", np.array(128, np.uint8))
    inputs = [rows, weights, qc.x_scale, const("w_scale", qc.w_scale.reshape(())), qc.x_zero, w_zero]
    if qc.bias_q is not None:
        # The export's own bias, rounded to the sum's units as it rounds it.
        nodes += [
            helper.make_node("Cast", [qc.bias_q], [n("bias_i")], to=1, name=n("CastBias")),
            helper.make_node("Mul", [n("bias_i"), qc.scale], [n("bias_f")], name=n("MulBias")),
            helper.make_node("Reshape", [n("bias_f"), const("flat", np.array([-1], np.int64))], [n("bias")], name=n("FlatBias")),
        ]
        inputs.append(n("bias"))
    nodes += [
        helper.make_node("MatMulIntegerToFloat", inputs, [n("yt")], domain="com.microsoft", name=n("MatMul")),
        helper.make_node("Transpose", [n("yt")], [qc.output], perm=[0, 2, 1], name=n("TransposeBack")),
    ]
    return nodes, inits
