"""conv_gemm: a dynamically quantized convolution, built as the Kokoro int8 export builds
it, computes the same after the rewrite (on small graphs; the real model's audio is
compared in tests/live/test_engines.py)."""

from __future__ import annotations

import platform

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

from rtts.engines.conv_gemm import exact_int8, gemm_convs
from rtts.engines.kokoro_quant import float_convs


def export_like(out_ch: int, in_ch: int, kernel: int, *, stride: int = 1, dilation: int = 1, pads: tuple[int, int] = (0, 0),
                bias: bool = True, zero: int = 70, spread: int = 120, seed: int = 0) -> onnx.ModelProto:
    """x -> DynamicQuantizeLinear -> ConvInteger(uint8 weights, zero point) [-> Add(bias
    divided by the scale, floored, int32)] -> Cast -> Mul(x scale · w scale): the export's chain."""
    rng = np.random.default_rng(seed)
    weights = np.clip(zero + rng.integers(-spread, spread + 1, (out_ch, in_ch, kernel)), 0, 255).astype(np.uint8)
    inits = [
        nh.from_array(weights, "w"),
        nh.from_array(np.array(zero, np.uint8), "w_zero"),
        nh.from_array(np.array(0.0123, np.float32), "w_scale"),
    ]
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("ConvInteger", ["xq", "w", "xz", "w_zero"], ["acc"], kernel_shape=[kernel], strides=[stride],
                         dilations=[dilation], pads=list(pads), group=1, name="/conv/Conv_quant"),
        helper.make_node("Mul", ["xs", "w_scale"], ["scale"]),
    ]
    summed = "acc"
    if bias:
        inits += [nh.from_array(rng.standard_normal(out_ch).astype(np.float32), "b"),
                  nh.from_array(np.array([-1, 1], np.int64), "column")]
        nodes += [
            helper.make_node("Div", ["b", "scale"], ["b_div"]),
            helper.make_node("Floor", ["b_div"], ["b_floor"]),
            helper.make_node("Cast", ["b_floor"], ["b_int"], to=TensorProto.INT32),
            helper.make_node("Reshape", ["b_int", "column"], ["b_q"]),
            helper.make_node("Add", ["acc", "b_q"], ["acc_b"]),
        ]
        summed = "acc_b"
    nodes += [helper.make_node("Cast", [summed], ["acc_f"], to=TensorProto.FLOAT), helper.make_node("Mul", ["acc_f", "scale"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, in_ch, None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def rewritten(model: onnx.ModelProto, how=gemm_convs) -> tuple[onnx.ModelProto, list[str]]:  # type: ignore[no-untyped-def]
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy, how(copy)


@pytest.mark.parametrize(
    "shape",
    [
        dict(out_ch=16, in_ch=24, kernel=1),  # conv1x1: no gather
        dict(out_ch=16, in_ch=24, kernel=3, pads=(1, 1)),
        dict(out_ch=8, in_ch=8, kernel=11, dilation=5, pads=(25, 25)),  # the generator's widest
        dict(out_ch=1, in_ch=1, kernel=3, stride=2, pads=(1, 1)),  # F0_conv
        dict(out_ch=16, in_ch=22, kernel=12, stride=6, pads=(3, 3)),  # noise_convs.0
        dict(out_ch=16, in_ch=24, kernel=5, pads=(2, 2), bias=False),
        dict(out_ch=16, in_ch=24, kernel=3, pads=(2, 0)),  # uneven padding
    ],
)
def test_the_rewritten_convolution_computes_the_same(shape: dict) -> None:
    model = export_like(**shape)
    gemm, names = rewritten(model)
    assert names == ["/conv/Conv_quant"]
    ops = [n.op_type for n in gemm.graph.node]
    assert "ConvInteger" not in ops and "MatMulIntegerToFloat" in ops
    for frames in (1, 7, 301):
        if (frames + sum(shape.get("pads", (0, 0)))) < shape.get("dilation", 1) * (shape["kernel"] - 1) + 1:
            continue  # shorter than the kernel: the export fails too
        x = (np.random.default_rng(frames).standard_normal((1, shape["in_ch"], frames)) * 2 + 0.3).astype(np.float32)
        want, got = run(model, x), run(gemm, x)
        assert got.shape == want.shape
        # The same integers; only the float steps' order differs (bias scaled before the sum).
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_weights_that_do_not_fit_int8_stay_as_they_are() -> None:
    model = export_like(8, 8, 3, pads=(1, 1), zero=20, spread=200)  # 20 + 200: 180 above the zero point
    gemm, names = rewritten(model)
    assert names == [] and "ConvInteger" in [n.op_type for n in gemm.graph.node]
    x = np.random.default_rng(1).standard_normal((1, 8, 50)).astype(np.float32)
    np.testing.assert_array_equal(run(gemm, x), run(model, x))


def test_float_convs_shares_the_chain_and_gives_the_real_valued_convolution() -> None:
    model = export_like(16, 24, 3, pads=(1, 1))
    real, names = rewritten(model, float_convs)
    assert names == ["/conv/Conv"] and [n.op_type for n in real.graph.node] == ["Conv"]
    x = np.random.default_rng(2).standard_normal((1, 24, 100)).astype(np.float32)
    want = run(model, x)  # 8-bit activations: near, not equal
    assert np.abs(run(real, x) - want).max() < 0.05 * np.abs(want).max()


@pytest.mark.parametrize("shape", [dict(out_ch=16, in_ch=24, kernel=1), dict(out_ch=8, in_ch=8, kernel=11, dilation=5, pads=(25, 25))])
@pytest.mark.parametrize("signed", [False, True])
def test_both_weight_forms_compute_the_same_where_this_cpu_is_exact(shape: dict, signed: bool) -> None:
    # uint8 weights (zero point 128) are exact everywhere; int8 ones only where the CPU's
    # uint8 x int8 product does not saturate (VNNI, ARM): on AVX2 alone they were 70 % off.
    if signed and not exact_int8():
        pytest.skip("this CPU's uint8 x int8 products saturate (no VNNI): the cut uses uint8 weights here")
    model = export_like(**shape)
    gemm, names = rewritten(model, lambda m: gemm_convs(m, signed=signed))
    assert names == ["/conv/Conv_quant"]
    x = (np.random.default_rng(3).standard_normal((1, shape["in_ch"], 301)) * 2 + 0.3).astype(np.float32)
    want, got = run(model, x), run(gemm, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_the_cpu_flags_decide_the_weight_form(tmp_path) -> None:  # type: ignore[no-untyped-def]
    vnni, avx2 = tmp_path / "vnni", tmp_path / "avx2"
    vnni.write_text("flags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n")
    avx2.write_text("flags\t\t: fpu sse2 avx2 fma\n")
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert exact_int8(vnni) and not exact_int8(avx2)
    assert exact_int8(tmp_path / "none") == (platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"))
