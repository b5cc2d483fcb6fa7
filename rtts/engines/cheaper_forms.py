"""A cheaper form of one of Kokoro's generator operations, computing the same.

``Pow(x, 2)``: the Snake activations' squares (50 of them) went through ``std::pow``;
``Mul(x, x)`` is the same number (IEEE pow and multiplication both round the exact
square once) and runs vectorized: the decoder's audio is bit for bit the same, in about
0.99x the time (benchmarks/engine_cost.py rewrites).

Tried and not kept (docs/history/benchmarks.md, issue 14): the harmonic source's STFT as a
strided Conv of 22 windowed cosines and sines. It matches ORT's STFT to 1e-5 and saved
9 % of the decoder, but the source's phase is an arctangent of those bins, some near
zero, and Mandarin's DNSMOS P.808 fell by 0.16.

Run by the Kokoro cut's child process (``kokoro_cut``), like ``conv_gemm``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rtts.engines.graph_edit import splice

if TYPE_CHECKING:
    import onnx

__all__ = ["squares_as_products"]


def squares_as_products(model: onnx.ModelProto) -> int:
    """Replace, in place, each ``Pow(x, 2)`` with ``Mul(x, x)``; returns how many."""
    from onnx import helper
    from onnx import numpy_helper as nh

    graph = model.graph
    nodes = list(graph.node)  # one walk: protobuf may give new objects at each
    twos = {i.name for i in graph.initializer if i.data_type == 1 and nh.to_array(i).size == 1 and nh.to_array(i).ravel()[0] == 2.0}
    replace = {}
    for node in nodes:
        if node.op_type == "Pow" and node.input[1] in twos:
            replace[id(node)] = [helper.make_node("Mul", [node.input[0], node.input[0]], list(node.output), name=node.name + "/Mul")]
    splice(graph, nodes, replace, set())
    return len(replace)
