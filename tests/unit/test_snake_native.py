"""The native Snake op (rtts/native/snake.c) against ONNX Runtime's own graph form and numpy,
its build and its fallbacks (rtts/native/__init__.py), and the decoder rewrite that uses it
(rtts/engines/snake.py), on small made-up graphs. The real decoder: tests/live/test_snake_live.py."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

import rtts.native
from rtts.engines.snake import snakes_as_ops
from rtts.native import snake_graph, snake_library, snake_model, snake_reference

@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which(os.environ.get("CC") or "cc") is None:
        pytest.skip("no C compiler: the graph form runs (test_no_compiler_means_the_graph_form)")
    built, why = snake_library(tmp_path_factory.mktemp("native-cache"), env={**os.environ, "RTTS_NATIVE_SNAKE": "1"})
    assert built is not None, why
    return built


def _session(model: onnx.ModelProto, library: Path | None = None, threads: int = 2) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    if library is not None:
        opts.register_custom_ops_library(str(library))
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _alpha(channels: int, low: float = 0.05, high: float = 3.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    alpha = np.random.default_rng(seed).uniform(low, high, (1, channels, 1)).astype(np.float32)
    return alpha, (1 / alpha).astype(np.float32)  # folded as the export folds Reciprocal(alpha)


@pytest.mark.parametrize(
    ("shape", "scale"),
    [((1, 128, 4801), 4.0), ((1, 256, 800), 10.0), ((2, 7, 301), 1.0), ((1, 3, 1), 30.0), ((1, 5, 0), 1.0)],
)
def test_op_is_the_graph_form_bit_for_bit(library: Path, shape: tuple[int, int, int], scale: float) -> None:
    # (2, 7, 301) and (1, 3, 1) leave values that fill no packet of 4: ORT's Sin gives those to sinf.
    alpha, inv = _alpha(shape[1])
    x = (np.random.default_rng(1).standard_normal(shape) * scale).astype(np.float32)
    got = _session(snake_model(alpha, inv), library).run(None, {"x": x})[0]
    want = _session(snake_graph(alpha, inv)).run(None, {"x": x})[0]
    assert got.shape == want.shape == shape
    assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} values differ"


def test_op_on_one_thread_and_two_is_the_same(library: Path) -> None:
    alpha, inv = _alpha(64)
    x = (np.random.default_rng(2).standard_normal((1, 64, 2001)) * 5).astype(np.float32)
    one, two = (_session(snake_model(alpha, inv), library, threads).run(None, {"x": x})[0] for threads in (1, 2))
    assert np.array_equal(one, two)


def test_op_against_numpy_on_edge_values(library: Path) -> None:
    # Tiny alphas (1/alpha = 1000), large |x|, signed zeros, subnormals, NaN and infinities;
    # the numpy reference has a correctly rounded sine, ORT's is within a unit of it.
    alpha = np.array([1e-3, 0.05, 1.0, 3.0], np.float32).reshape(1, 4, 1)
    inv = (1 / alpha).astype(np.float32)
    row = np.array([0.0, -0.0, 1e-40, -1e-38, 1e-6, 0.5, -3.0, 100.0, -2e4, 8e4, 1e7, -3e38,
                    np.nan, np.inf, -np.inf, 7.0], np.float32)
    x = np.tile(row, (1, 4, 1))
    got = _session(snake_model(alpha, inv), library).run(None, {"x": x})[0]
    want = snake_reference(x, alpha, inv)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    assert np.allclose(got[finite], want[finite], rtol=2e-6, atol=1e-6)
    assert not np.any(np.signbit(got[:, :, 1]))  # -0 + (+0) is +0, in the graph too
    assert np.all(np.isnan(got[:, :, 12:15]))  # sin(±inf) is NaN in the graph too
    graph = _session(snake_graph(alpha, inv)).run(None, {"x": x})[0]
    with np.errstate(over="ignore", invalid="ignore"):
        ordinary = np.abs(alpha * x) < 25966  # beyond, Eigen reduces huge arguments its own way
    assert np.array_equal(got[ordinary], graph[ordinary])


def test_op_refuses_what_it_cannot_compute(library: Path) -> None:
    alpha, inv = _alpha(4)
    model = snake_model(alpha, inv)
    for io in (*model.graph.input, *model.graph.output):  # any shape gets to the kernel
        io.type.tensor_type.ClearField("shape")
    session = _session(model, library)
    with pytest.raises(Exception, match="one value per channel"):
        session.run(None, {"x": np.zeros((1, 5, 10), np.float32)})  # 5 channels, 4 alphas
    with pytest.raises(Exception, match="N x C x T"):
        session.run(None, {"x": np.zeros((4, 10), np.float32)})


def test_no_compiler_means_the_graph_form(tmp_path: Path) -> None:
    assert snake_library(tmp_path, env={"CC": "/nonexistent/cc", "PATH": os.environ["PATH"]}) == (
        None, "no C compiler (/nonexistent/cc not found)")
    assert snake_library(tmp_path, env={"PATH": str(tmp_path)}) == (None, "no C compiler (cc not found)")
    assert snake_library(tmp_path, env={**os.environ, "RTTS_NATIVE_SNAKE": "0"}) == (None, "RTTS_NATIVE_SNAKE=0")
    assert not (tmp_path / "native").exists()


def test_a_library_built_before_the_compiler_was_removed_is_used(library: Path, tmp_path: Path) -> None:
    """A container image builds the library with a compiler and runs without one; a
    library built for another CPU, ORT or source (another "machine") is not taken."""
    no_cc = {"CC": "/nonexistent/cc", "PATH": os.environ["PATH"]}
    got, why = snake_library(library.parent.parent, env=no_cc)
    assert got == library and why.startswith("built with -std=c11") and "compiler was removed" in why
    (tmp_path / "native").mkdir()
    shutil.copy(library, tmp_path / "native" / library.name)
    meta = json.loads(library.with_suffix(".json").read_text())
    (tmp_path / "native" / library.with_suffix(".json").name).write_text(json.dumps({**meta, "machine": "another"}))
    assert snake_library(tmp_path, env=no_cc) == (None, "no C compiler (/nonexistent/cc not found)")


def _fake_cc(folder: Path, body: str) -> Path:
    script = folder / "fake-cc"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_a_failed_build_is_remembered_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cc = _fake_cc(tmp_path, 'echo "cc: internal error" >&2; exit 1')
    env = {"CC": str(cc), "PATH": os.environ["PATH"]}
    library, why = snake_library(tmp_path / "cache", env=env)
    assert library is None and "internal error" in why
    [meta] = (tmp_path / "cache" / "native").glob("snake-*.json")
    assert "error" in json.loads(meta.read_text())
    assert not list((tmp_path / "cache" / "native").glob("*.so")) + list((tmp_path / "cache" / "native").glob(".*"))

    def no_child(*args: object, **kw: object) -> None:
        raise AssertionError("built again")

    monkeypatch.setattr(subprocess, "run", no_child)
    assert snake_library(tmp_path / "cache", env=env) == (None, why)


def _has_fma() -> bool:
    try:
        return " fma " in Path("/proc/cpuinfo").read_text() and os.uname().machine == "x86_64"
    except OSError:
        return False


@pytest.mark.skipif(not _has_fma(), reason="needs an x86-64 CPU with fused multiply-adds")
def test_a_library_that_is_not_bit_exact_is_refused(library: Path, tmp_path: Path) -> None:
    # The same source built with fused multiply-adds rounds differently from ORT's Sin: the
    # build's self-test must refuse it, so the audio never changes.
    cc = _fake_cc(tmp_path, 'exec cc "$@" -ffp-contract=fast -mfma')
    built, why = snake_library(tmp_path / "cache", env={"CC": str(cc), "PATH": os.environ["PATH"]})
    assert built is None and "differ from ONNX Runtime's own Sin" in why, why
    assert not list((tmp_path / "cache" / "native").glob("*.so"))


def test_a_changed_source_is_another_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = rtts.native._files(tmp_path, "/usr/bin/cc")
    assert first == rtts.native._files(tmp_path, "/usr/bin/cc")
    assert first != rtts.native._files(tmp_path, "/usr/bin/clang")
    monkeypatch.setattr(rtts.native, "_cpu_flags", lambda: "flags : sse2")
    assert first != rtts.native._files(tmp_path, "/usr/bin/cc")


def _chain(x: str, alpha: str, inv: str, out: str, swap: bool = False) -> list[onnx.NodeProto]:
    """One Snake as Kokoro's export spells it (swap: the other operand orders)."""
    mul = helper.make_node("Mul", [x, alpha] if swap else [alpha, x], [out + "_ax"])
    return [
        mul,
        helper.make_node("Sin", [out + "_ax"], [out + "_s"]),
        helper.make_node("Mul", [out + "_s", out + "_s"], [out + "_sq"]),
        helper.make_node("Mul", [out + "_sq", inv] if swap else [inv, out + "_sq"], [out + "_m"]),
        helper.make_node("Add", [out + "_m", x] if swap else [x, out + "_m"], [out]),
    ]


def _decoder_like() -> onnx.ModelProto:
    """Two Snakes around a Conv, a Sin that is no Snake (its product is used elsewhere too),
    and a Snake whose alpha is a scalar: only the first two are rewritten."""
    a1, i1 = _alpha(4, seed=3)
    a2, i2 = _alpha(4, seed=4)
    weight = np.random.default_rng(5).standard_normal((4, 4, 3)).astype(np.float32) * 0.3
    nodes = [
        *_chain("x", "a1", "i1", "h1"),
        helper.make_node("Conv", ["h1", "w"], ["c"], pads=[1, 1]),
        *_chain("c", "a2", "i2", "h2", swap=True),
        helper.make_node("Mul", ["a2", "h2"], ["n_ax"]),
        helper.make_node("Sin", ["n_ax"], ["n_s"]),
        helper.make_node("Add", ["n_s", "n_ax"], ["h3"]),  # n_ax read twice: not a Snake
        *_chain("h3", "scalar", "scalar", "y"),
    ]
    inits = [nh.from_array(v, k) for k, v in
             {"a1": a1, "i1": i1, "a2": a2, "i2": i2, "w": weight, "scalar": np.array(0.5, np.float32)}.items()]
    graph = helper.make_graph(nodes, "d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, None])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_rewrite_finds_the_snakes_and_keeps_the_output(library: Path) -> None:
    model = _decoder_like()
    before = _session(model)
    assert snakes_as_ops(model) == 2
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Snake") == 2 and ops.count("Sin") == 2  # the non-Snake and the scalar one stay
    assert {n.domain for n in model.graph.node if n.op_type == "Snake"} == {"ai.rtts"}
    assert "ai.rtts" in {o.domain for o in model.opset_import}
    onnx.checker.check_model(model)
    x = (np.random.default_rng(6).standard_normal((1, 4, 999)) * 3).astype(np.float32)
    assert np.array_equal(_session(model, library).run(None, {"x": x})[0], before.run(None, {"x": x})[0])
    assert snakes_as_ops(model) == 0  # nothing left to do


def test_rewritten_graph_needs_the_library() -> None:
    model = _decoder_like()
    snakes_as_ops(model)
    with pytest.raises(Exception, match="Snake"):
        _session(model)  # why the cut that has it is another recipe, loaded only with the library


def _output_of(body: str) -> str:
    """A fake compiler's script: find the -o path of its arguments, then ``body``."""
    return 'while [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done\n' + body


def test_a_library_that_does_not_load_is_refused_and_remembered(tmp_path: Path) -> None:
    cc = _fake_cc(tmp_path, _output_of('printf "not an ELF file" > "$out"'))
    env = {"CC": str(cc), "PATH": os.environ["PATH"]}
    library, why = snake_library(tmp_path / "cache", env=env)
    assert library is None and "Failed to load library" in why, why
    assert snake_library(tmp_path / "cache", env=env) == (None, why)


def test_a_library_that_crashes_the_check_never_reaches_the_server(tmp_path: Path) -> None:
    # Its registration aborts the process: only the build's child dies, and the failure is
    # kept like a failed build.
    crash = tmp_path / "crash.c"
    crash.write_text("#include <stdlib.h>\nvoid *RegisterCustomOps(void *o, void *a) { abort(); }\n")
    cc = _fake_cc(tmp_path, _output_of(f'exec cc -shared -fPIC -o "$out" {crash}'))
    env = {"CC": str(cc), "PATH": os.environ["PATH"]}
    library, why = snake_library(tmp_path / "cache", env=env)
    assert library is None and "the build's child failed" in why, why
    assert snake_library(tmp_path / "cache", env=env) == (None, why)
