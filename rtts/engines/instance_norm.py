"""Kokoro's instance normalizations as one ONNX Runtime kernel each.

The export spells every ``InstanceNorm1d`` of its AdaIN layers (54 in the decoder) out
in seven elementwise steps: ``ReduceMean -> Sub -> Mul(d, d) -> ReduceMean -> Add(eps)
-> Sqrt -> Div``, each a pass over a tensor of up to 128 channels x 4,800 frames per
second of audio. ``InstanceNormalization`` does the same in two passes. Its scale and
bias (ones and zeros: the AdaIN's own affine step follows) are made at run time from
the input's channel count, which the export's shapes do not carry.

Run by the Kokoro cut's child process (``kokoro_cut``), like ``conv_gemm``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from rtts.engines.graph_edit import splice

if TYPE_CHECKING:
    import onnx

__all__ = ["fuse_instance_norms"]


def fuse_instance_norms(model: onnx.ModelProto) -> int:
    """Replace, in place, each spelled-out normalization over the last axis of a
    3-D tensor with ``InstanceNormalization``; returns how many."""
    from onnx import helper
    from onnx import numpy_helper as nh

    graph = model.graph
    nodes = list(graph.node)  # one walk: protobuf may give new objects at each
    inits = {i.name: nh.to_array(i) for i in graph.initializer}
    producer = {o: n for n in nodes for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in nodes:
        for name in dict.fromkeys(node.input):  # once per node, even if it takes a tensor twice
            consumers[name].append(node)

    def only(name: str, op: str) -> onnx.NodeProto | None:
        users = consumers[name]
        return users[0] if len(users) == 1 and users[0].op_type == op else None

    def last_axis(node: onnx.NodeProto) -> bool:
        axes = inits.get(node.input[1]) if len(node.input) > 1 else None
        keep = next((a.i for a in node.attribute if a.name == "keepdims"), 1)
        return axes is not None and keep == 1 and [int(a) for a in np.ravel(axes)] in ([2], [-1])

    replace: dict[int, list[onnx.NodeProto]] = {}
    drop: set[int] = set()
    count = 0
    for mean in [n for n in nodes if n.op_type == "ReduceMean" and last_axis(n)]:
        x = mean.input[0]
        sub = only(mean.output[0], "Sub")
        if sub is None or list(sub.input) != [x, mean.output[0]]:
            continue
        users = consumers[sub.output[0]]
        square = next((u for u in users if u.op_type == "Mul" and list(u.input) == [sub.output[0]] * 2), None)
        div = next((u for u in users if u.op_type == "Div" and u.input[0] == sub.output[0]), None)
        if square is None or div is None or len(users) != 2:
            continue
        var = only(square.output[0], "ReduceMean")
        add = only(var.output[0], "Add") if var is not None and last_axis(var) else None
        eps = next((inits[i] for i in add.input if i in inits), None) if add is not None else None
        sqrt = only(add.output[0], "Sqrt") if add is not None else None
        if sqrt is None or eps is None or np.size(eps) != 1 or div.input[1] != sqrt.output[0]:
            continue
        name = mean.name.rsplit("/", 1)[0] + "/InstanceNormalization"
        replace[id(div)] = [
            helper.make_node("Shape", [x], [name + "/channels"], start=1, end=2, name=name + "/Shape"),
            helper.make_node("ConstantOfShape", [name + "/channels"], [name + "/ones"], name=name + "/Ones",
                             value=nh.from_array(np.ones(1, np.float32))),
            helper.make_node("ConstantOfShape", [name + "/channels"], [name + "/zeros"], name=name + "/Zeros",
                             value=nh.from_array(np.zeros(1, np.float32))),
            helper.make_node("InstanceNormalization", [x, name + "/ones", name + "/zeros"], [div.output[0]],
                             name=name, epsilon=float(np.ravel(eps)[0])),
        ]
        drop.update(id(n) for n in (mean, sub, square, var, add, sqrt, div))
        count += 1
    splice(graph, nodes, replace, drop)
    return count
