"""Native ONNX Runtime kernels, built from their C source on the machine that runs them.

Only one so far: Kokoro's Snake activation in one vectorized pass (``snake.c``, op
``ai.rtts::Snake``; the graph rewrite that uses it is ``rtts.engines.snake``). The wheel
ships the source, not a binary: the kernel is compiled with ``-march=native`` for this
CPU, with the system C compiler (``$CC``, else ``cc``), at the first Kokoro load.

``snake_library`` builds it once, in a child process (``python -m rtts.native OUT META``),
which also loads the library into ONNX Runtime and checks it against numpy before it is
kept: a library that does not build, load or compute right is never handed to the
inference process, whose sessions would then fail or crash. It is kept in the cache
directory under a name made of what it was built from (the source and headers, the
compiler command and flags, the onnxruntime version and the CPU's flags), and a failed
build is remembered under that name too, so a box without a working compiler does not try
again at every load. With no compiler, a library kept in the cache that was built from
these sources for this ORT and CPU is still used (a container image builds it, then drops
the compiler: see docs/deployment.md). Where there is neither, or ``RTTS_NATIVE_SNAKE=0``,
Kokoro runs the Snakes as the exported graph's nodes (the same audio to ~1e-6; see
README.md here).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["BUILD_TIMEOUT_S", "DOMAIN", "ENV", "snake_library"]

DOMAIN = "ai.rtts"
ENV = "RTTS_NATIVE_SNAKE"  # "0": run the Snakes as graph nodes even where the library builds
BUILD_TIMEOUT_S = 120.0
# A library of other sources, another ORT or CPU is removed once unused for this long
# (another rtts version may share the cache dir and still load it).
UNUSED_S = 7 * 24 * 3600.0

HERE = Path(__file__).resolve().parent
SOURCES = ("snake.c", "include/onnxruntime_c_api.h", "include/onnxruntime_ep_c_api.h")
# -ffp-contract=off keeps the graph's roundings (snake.c); tried in order, the first that
# builds is kept: a compiler that does not know -march=native still gets a working library.
COMMON = ("-std=c11", "-O3", "-ffp-contract=off", "-fno-trapping-math", "-fPIC", "-shared", "-Iinclude")
ARCH = (("-march=native",), ())


def snake_library(cache_dir: Path, env: dict[str, str] | None = None) -> tuple[Path | None, str]:
    """The Snake op library for this machine, building it first if needed; ``(None, why)``
    when it is turned off (``RTTS_NATIVE_SNAKE=0``) or cannot be built or trusted."""
    env = dict(os.environ if env is None else env)
    if env.get(ENV, "1") == "0":
        return None, f"{ENV}=0"
    compiler = shutil.which(env.get("CC") or "cc", path=env.get("PATH"))
    if compiler is None:
        # A container image builds the library with a compiler and runs without one.
        kept = _built_here(cache_dir)
        if kept is not None:
            return kept
        return None, f"no C compiler ({env.get('CC') or 'cc'} not found)"
    try:
        library, meta_path = _files(cache_dir, compiler)
        if not meta_path.is_file():
            library.parent.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                [sys.executable, "-m", "rtts.native", str(library), str(meta_path), compiler],
                capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env=env,
                cwd=HERE.parents[1],  # so a checkout's rtts is found too
            )
            if not meta_path.is_file():  # it died: the library crashed ONNX Runtime, say
                error = f"the build's child failed: {done.stderr.strip()[-300:] or done.returncode}"
                meta_path.write_text(json.dumps({"error": error}))  # not tried again either
                return None, error
        else:
            with contextlib.suppress(OSError):
                os.utime(meta_path)  # its mtime says when it was last used (see _prune)
        _prune(library.parent, meta_path)
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return None, f"cannot build it in {cache_dir}: {exc}"
    if meta.get("error") or not library.is_file():
        return None, str(meta.get("error") or "the library is gone")
    return library, f"built with {' '.join(meta.get('flags', []))}"


def _files(cache_dir: Path, compiler: str) -> tuple[Path, Path]:
    """Where the library built from these sources by ``compiler`` for this ORT and CPU is
    kept, and its description (written last: the library is complete when it exists)."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update((HERE / name).read_bytes())
    digest.update(repr((compiler, COMMON, ARCH)).encode())
    try:
        digest.update(importlib.metadata.version("onnxruntime").encode())
    except importlib.metadata.PackageNotFoundError:
        pass  # the build's self-test will say so
    digest.update(_cpu_flags().encode())
    stem = f"snake-{digest.hexdigest()[:16]}"
    folder = cache_dir / "native"
    return folder / f"{stem}.so", folder / f"{stem}.json"


def _machine() -> str:
    """What a library must have been built from and for to run here, whatever compiler
    built it: the sources and flags, the onnxruntime version and the CPU's flags."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update((HERE / name).read_bytes())
    digest.update(repr((COMMON, ARCH)).encode())
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        digest.update(importlib.metadata.version("onnxruntime").encode())
    digest.update(_cpu_flags().encode())
    return digest.hexdigest()[:16]


def _built_here(cache_dir: Path) -> tuple[Path, str] | None:
    """A library kept in ``cache_dir`` that was built (and self-tested) from these sources
    for this ORT and CPU by a compiler that is gone since; None when there is none."""
    try:
        machine = _machine()
        for meta_path in sorted((cache_dir / "native").glob("snake-*.json")):
            with contextlib.suppress(OSError, ValueError):
                meta = json.loads(meta_path.read_text())
                library = meta_path.with_suffix(".so")
                if meta.get("machine") == machine and not meta.get("error") and library.is_file():
                    with contextlib.suppress(OSError):
                        os.utime(meta_path)  # used (see _prune)
                    flags = " ".join(meta.get("flags", []))
                    return library, f"built with {flags} before the compiler was removed"
    except OSError:
        pass
    return None


def _cpu_flags() -> str:
    """What -march=native compiles for (like host/sessions.py's optimized graphs)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return next((line for line in f if line.startswith(("flags", "Features"))), platform.processor())
    except OSError:
        return platform.machine() + platform.processor()


def _prune(folder: Path, kept: Path, now: float | None = None) -> None:
    """Remove libraries (and their descriptions) other than ``kept``'s not used for UNUSED_S."""
    cutoff = (time.time() if now is None else now) - UNUSED_S
    for meta_path in folder.glob("snake-*.json"):
        with contextlib.suppress(OSError):
            if meta_path != kept and meta_path.stat().st_mtime < cutoff:
                meta_path.unlink()
                meta_path.with_suffix(".so").unlink(missing_ok=True)


def build(library: Path, meta_path: Path, compiler: str) -> None:
    """In the child: compile the library, check it in ONNX Runtime, then keep it and its
    description; on any failure keep only the description, saying why."""
    tmp = library.with_name(f".{library.name}.{os.getpid()}.tmp")
    meta: dict = {}
    try:
        errors = []
        for arch in ARCH:
            flags = [*COMMON, *arch]
            done = subprocess.run(
                [compiler, *flags, "snake.c", "-o", str(tmp), "-lm"],
                cwd=HERE, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S / 2,
            )
            if done.returncode == 0:
                meta["flags"] = flags
                break
            errors.append(done.stderr.strip()[-300:] or f"exit {done.returncode}")
        else:
            raise RuntimeError(f"{compiler} failed: {' | '.join(errors)}")
        self_test(tmp)
        meta["machine"] = _machine()
        os.replace(tmp, library)
    except Exception as exc:  # noqa: BLE001 (whatever went wrong, the graph form runs)
        meta = {"error": f"{type(exc).__name__}: {exc}"}
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    out = meta_path.with_name(f".{meta_path.name}.{os.getpid()}.tmp")
    out.write_text(json.dumps(meta))
    os.replace(out, meta_path)


def self_test(library: Path) -> None:
    """Run the op and the graph form it replaces in ONNX Runtime on random and edge values;
    AssertionError unless they agree in every bit (the sine is ORT's own, snake.c), but
    where |alpha·x| is huge (never in Kokoro), where both need only be near the true value."""
    import numpy as np
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    channels = 7
    alpha = rng.uniform(0.05, 3.0, (1, channels, 1)).astype(np.float32)
    inv = (1 / alpha).astype(np.float32)
    x = (rng.standard_normal((2, channels, 301)) * 8).astype(np.float32)  # 4214 values: 2 for sinf
    x[0, 0, :8] = [0.0, -0.0, 1e-30, -1e-30, np.nan, np.inf, -np.inf, 3e4]
    x[0, 1, :2] = [1e7, -3e38]
    outputs = []
    for model in (snake_model(alpha, inv), snake_graph(alpha, inv)):
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        if not outputs:
            opts.register_custom_ops_library(str(library))
        session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        outputs.append(session.run(None, {"x": x})[0])
        outputs.append(session.run(None, {"x": x[:, :, :300]})[0])  # 4200: none for sinf
    got, got_even, want, want_even = outputs
    assert got.shape == x.shape and got.dtype == np.float32, (got.shape, got.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        huge = ~(np.abs(alpha * x) < 25966)  # Eigen's own reduction there; NaN too
    for a, b, h in ((got, want, huge), (got_even, want_even, huge[:, :, :300])):
        differ = int(np.count_nonzero((a != b) & ~h))
        assert differ == 0, f"{differ} of {a.size} values differ from ONNX Runtime's own Sin"
        assert np.array_equal(np.isnan(a), np.isnan(b)), "NaNs differ"
    near = huge & np.isfinite(want)
    per_value = (np.broadcast_to(p, x.shape)[near] for p in (alpha, inv))
    close = snake_reference(x[near], *per_value)
    assert np.allclose(got[near], close, rtol=1e-6, atol=1e-6), "huge arguments"


def snake_graph(alpha, inv):  # noqa: ANN001, ANN201
    """The graph form the op replaces, as Kokoro's export spells it (squares as products)."""
    from onnx import TensorProto, helper
    from onnx import numpy_helper as nh

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, alpha.shape[1], None])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, alpha.shape[1], None])
    nodes = [
        helper.make_node("Mul", ["alpha", "x"], ["ax"]),
        helper.make_node("Sin", ["ax"], ["s"]),
        helper.make_node("Mul", ["s", "s"], ["sq"]),
        helper.make_node("Mul", ["inv", "sq"], ["m"]),
        helper.make_node("Add", ["x", "m"], ["y"]),
    ]
    initializers = [nh.from_array(alpha, "alpha"), nh.from_array(inv, "inv")]
    graph = helper.make_graph(nodes, "snake", [x], [y], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def snake_model(alpha, inv):  # noqa: ANN001, ANN201 (numpy arrays in, an onnx.ModelProto out)
    """A one-node model: y = Snake(x, alpha, inv) with the two as initializers."""
    from onnx import TensorProto, helper
    from onnx import numpy_helper as nh

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, alpha.shape[1], None])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, alpha.shape[1], None])
    node = helper.make_node("Snake", ["x", "alpha", "inv"], ["y"], domain=DOMAIN)
    initializers = [nh.from_array(alpha, "alpha"), nh.from_array(inv, "inv")]
    graph = helper.make_graph([node], "snake", [x], [y], initializers)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets)


def snake_reference(x, alpha, inv):  # noqa: ANN001, ANN201
    """The op in numpy with the graph's float roundings and a correctly rounded sine (ORT's
    is within a unit in the last place of it)."""
    import numpy as np

    with np.errstate(invalid="ignore", over="ignore"):  # sin(±inf) is NaN; 3e38·3 is inf
        s = np.sin((alpha * x).astype(np.float64)).astype(np.float32)
        return x + inv * (s * s)
