"""A student's weights read back from its ONNX export (``export``), int8 or not: the way
to go on training from the file that ships when the checkpoint that made it is gone
(``train --init models/kokoro-student.onnx``).

An int8 export holds each MatMul's weight as int8 with one scale and zero point; read
back, it is that rounded weight in float, the start a further run refines."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch


def state_dict(path: Path) -> dict[str, torch.Tensor]:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    arrays = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    # Convolutions, norms, biases and scales keep the names torch gave them.
    state = {name.removeprefix("student."): torch.from_numpy(a.copy()) for name, a in arrays.items() if name.startswith("student.") and not name.endswith(("_quantized", "_scale", "_zero_point"))}
    for node in model.graph.node:
        # A Linear's weight is a MatMul's second input, transposed, under an anonymous
        # name: the node's output says which module it belongs to.
        if node.op_type not in ("MatMul", "MatMulInteger", "Gemm"):
            continue
        found = re.match(r"/student/(.+)/(?:MatMul|Gemm)", node.output[0])
        if not found:
            continue
        module = found.group(1).replace("/", ".")
        if node.op_type == "MatMulInteger":
            base = node.input[1].removesuffix("_quantized")
            weight = (arrays[node.input[1]].astype(np.float32) - arrays[f"{base}_zero_point"].astype(np.float32)) * arrays[f"{base}_scale"]
        else:
            weight = arrays[node.input[1]]
            if any(a.name == "transB" and a.i for a in node.attribute):
                weight = weight.T
        state[f"{module}.weight"] = torch.from_numpy(np.ascontiguousarray(weight.T, dtype=np.float32))
    return state
