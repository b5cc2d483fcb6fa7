"""instance_norm: the export's spelled-out InstanceNorm1d becomes one kernel and computes the same."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

from rtts.engines.instance_norm import fuse_instance_norms


def spelled_out(axes: list[int], square_by_pow: bool = False) -> onnx.ModelProto:
    """x -> ReduceMean -> Sub -> Mul(d, d) -> ReduceMean -> Add(eps) -> Sqrt -> Div, then
    the AdaIN's affine step, as the Kokoro export has it."""
    square = (helper.make_node("Pow", ["d", "two"], ["d2"]) if square_by_pow else helper.make_node("Mul", ["d", "d"], ["d2"]))
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes"], ["mean"], keepdims=1),
        helper.make_node("Sub", ["x", "mean"], ["d"]),
        square,
        helper.make_node("ReduceMean", ["d2", "axes"], ["var"], keepdims=1),
        helper.make_node("Add", ["var", "eps"], ["var_eps"]),
        helper.make_node("Sqrt", ["var_eps"], ["std"]),
        helper.make_node("Div", ["d", "std"], ["norm"]),
        helper.make_node("Mul", ["norm", "gamma"], ["scaled"]),
        helper.make_node("Add", ["scaled", "beta"], ["y"]),
    ]
    rng = np.random.default_rng(0)
    inits = [nh.from_array(np.array(axes, np.int64), "axes"), nh.from_array(np.array(1e-5, np.float32), "eps"),
             nh.from_array(np.array(2.0, np.float32), "two"),
             nh.from_array(rng.standard_normal((1, 6, 1)).astype(np.float32), "gamma"),
             nh.from_array(rng.standard_normal((1, 6, 1)).astype(np.float32), "beta")]
    graph = helper.make_graph(nodes, "norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_the_normalization_is_one_kernel_and_computes_the_same() -> None:
    for axes in ([2], [-1]):
        model = spelled_out(axes)
        fused = onnx.ModelProto()
        fused.CopyFrom(model)
        assert fuse_instance_norms(fused) == 1
        ops = [n.op_type for n in fused.graph.node]
        assert "InstanceNormalization" in ops and "ReduceMean" not in ops and "Sqrt" not in ops
        for frames in (1, 5, 4000):
            x = (np.random.default_rng(frames).standard_normal((1, 6, frames)) * 3 + 2).astype(np.float32)
            np.testing.assert_allclose(run(fused, x), run(model, x), rtol=1e-5, atol=1e-5)


def test_other_reductions_are_left_alone() -> None:
    for model in (spelled_out([1]), spelled_out([2], square_by_pow=True)):  # over channels; squared another way
        before = [n.op_type for n in model.graph.node]
        assert fuse_instance_norms(model) == 0
        assert [n.op_type for n in model.graph.node] == before
