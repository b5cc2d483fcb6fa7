"""Splicing new nodes into an ONNX graph in place of old ones (conv_gemm, instance_norm).

Run by the Kokoro cut's child process, like the rewrites that use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

__all__ = ["splice"]


def splice(
    graph: onnx.GraphProto,
    nodes: list[onnx.NodeProto],
    replace: Mapping[int, list[onnx.NodeProto]],
    drop: set[int],
    added: Iterable[onnx.TensorProto] = (),
) -> None:
    """Make ``nodes`` (the graph's, in order, as one list: protobuf may give a new Python
    object for a node at each walk of ``graph.node``) the graph's nodes, with those whose
    ``id`` is a key of ``replace`` replaced by its nodes and those in ``drop`` left out;
    then drop what no longer feeds an output, keep only the initializers still used and
    add ``added``."""
    kept = []
    for node in nodes:
        if id(node) in replace:
            kept += replace[id(node)]
        elif id(node) not in drop:
            kept.append(node)
    outputs = {o.name for o in graph.output}
    while True:  # what fed only the replaced nodes (a float bias's quantization)
        used = {i for n in kept for i in n.input} | outputs
        still = [n for n in kept if any(o in used for o in n.output)]
        if len(still) == len(kept):
            break
        kept = still
    del graph.node[:]
    graph.node.extend(kept)
    used = {i for n in kept for i in n.input}
    initializers = [i for i in graph.initializer if i.name in used] + list(added)
    del graph.initializer[:]
    graph.initializer.extend(initializers)
