"""Kokoro's Snake activations as one native op each (``ai.rtts::Snake``, rtts/native).

The generator's 50 Snakes are exported as five elementwise nodes, ``x + (1/α)·sin²(αx)``:
``Mul(α, x)``, ``Sin``, ``Mul(s, s)`` (a ``Pow`` before ``cheaper_forms``), ``Mul(1/α, ·)``
with the reciprocal already folded into an initializer, and ``Add(x, ·)``. ONNX Runtime's
Sin is a scalar loop, about a fifth of the decoder's time (issue 21); the native op does
the chain in one vectorized pass with the graph's own α and 1/α and its roundings, the
sine correctly rounded instead of ORT's (within one unit in the last place of it).

Only when the library has built (``rtts.native.snake_library``); the cut made with this
rewrite is another recipe (``kokoro_cut.SNAKE_CUT``), so the two forms are never mixed up.
Made by the cut's child process, ``snake_cut.py``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from rtts.engines.graph_edit import splice

if TYPE_CHECKING:
    import onnx

__all__ = ["DOMAIN", "snakes_as_ops"]

DOMAIN = "ai.rtts"  # rtts.native.DOMAIN; not imported, so this cut's recipe is its own source


def snakes_as_ops(model: onnx.ModelProto) -> int:
    """Replace, in place, each Snake chain whose α and 1/α are per-channel initializers
    (1 x C x 1) with one ``Snake(x, α, 1/α)`` node; returns how many."""
    from onnx import helper
    from onnx import numpy_helper as nh

    graph = model.graph
    nodes = list(graph.node)  # one walk: protobuf may give new objects at each
    producer = {out: node for node in nodes for out in node.output}
    users: defaultdict[str, list] = defaultdict(list)
    for node in nodes:
        for name in dict.fromkeys(node.input):  # Mul(s, s) reads s once
            users[name].append(node)
    shapes = {i.name: tuple(nh.to_array(i).shape) for i in graph.initializer if i.data_type == 1}
    outputs = {o.name for o in graph.output}

    def only_user(name: str, op: str):  # noqa: ANN202
        """The one node that reads ``name``, if it is an ``op`` and ``name`` is no output."""
        found = users.get(name, [])
        return found[0] if len(found) == 1 and found[0].op_type == op and name not in outputs else None

    def per_channel(name: str) -> bool:
        shape = shapes.get(name, ())
        return len(shape) == 3 and shape[0] == 1 and shape[2] == 1

    replace, drop = {}, set()
    for sin in nodes:
        scale = producer.get(sin.input[0]) if sin.op_type == "Sin" else None
        if scale is None or scale.op_type != "Mul" or only_user(scale.output[0], "Sin") is not sin:
            continue
        alpha, x = scale.input if per_channel(scale.input[0]) else scale.input[::-1]
        square = only_user(sin.output[0], "Mul")
        if not per_channel(alpha) or square is None or list(square.input) != [sin.output[0]] * 2:
            continue
        weigh = only_user(square.output[0], "Mul")
        inv = next((name for name in weigh.input if name != square.output[0]), None) if weigh else None
        add = only_user(weigh.output[0], "Add") if weigh else None
        if inv is None or shapes.get(inv) != shapes[alpha] or add is None:
            continue
        if sorted(add.input) != sorted([x, weigh.output[0]]):
            continue
        name = (add.name or add.output[0]) + "/Snake"  # names must be unique
        snake = helper.make_node("Snake", [x, alpha, inv], list(add.output), name=name, domain=DOMAIN)
        replace[id(add)] = [snake]
        drop |= {id(scale), id(sin), id(square), id(weigh)}
    if replace:
        splice(graph, nodes, replace, drop)
        if not any(op.domain == DOMAIN for op in model.opset_import):
            model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return len(replace)

