"""cheaper_forms: Pow(x, 2) as Mul(x, x) gives the same numbers (the real decoder's audio,
bit for bit, is checked in tests/live/test_engines.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

from rtts.engines.cheaper_forms import squares_as_products


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def rewritten(model: onnx.ModelProto, how) -> tuple[onnx.ModelProto, int]:  # type: ignore[no-untyped-def]
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy, how(copy)


def test_squares_become_products_and_give_the_same_numbers() -> None:
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]), helper.make_node("Pow", ["sq", "three"], ["y"])]
    graph = helper.make_graph(nodes, "pow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [nh.from_array(np.array(2.0, np.float32), "two"), nh.from_array(np.array(3.0, np.float32), "three")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    products, count = rewritten(model, squares_as_products)
    assert count == 1 and [n.op_type for n in products.graph.node] == ["Mul", "Pow"]  # the cube stays
    x = (np.random.default_rng(0).standard_normal(100_000) * 3).astype(np.float32)
    np.testing.assert_array_equal(run(products, x), run(model, x))  # IEEE: the same rounding of x·x
