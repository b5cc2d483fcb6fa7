"""The trained student as ONNX for rtts (``rtts.engines.kokoro_student``): inputs named
as the tensors of Kokoro's cut decoder they are fed from (the generator's input, F0 and
the whole 256-wide style, of which the student reads the decoder's half), outputs the five
spectra ``hibari.dsp`` takes. Int8 weights (dynamic quantization of the MatMuls) with
``--int8``, where it holds quality (docs/benchmarks.md says which shipped).

    python -m training.kokoro_student.export OUT_DIR/student.pt models/kokoro-student.onnx [--int8]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from training.kokoro_student.model import Student
from training.kokoro_student.teacher import GEN_IN

F0_IN = "/encoder/Reshape_output_0"
OUTPUTS = ("lh", "th", "ln", "lr", "phi")


class Exported(torch.nn.Module):
    def __init__(self, student: Student) -> None:
        super().__init__()
        self.student = student

    def forward(self, gen_in: torch.Tensor, f0: torch.Tensor, style: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.student(gen_in, f0, style[:, :128])


def export(checkpoint: Path, out: Path, int8: bool = False) -> None:
    state = torch.load(checkpoint, map_location="cpu")
    student = Student()
    student.load_state_dict(state["model"])
    student.eval()
    frames = 64
    args = (torch.zeros(1, 512, frames), torch.full((1, frames), 150.0), torch.zeros(1, 256))
    target = out if not int8 else Path(tempfile.mkdtemp()) / "fp32.onnx"
    torch.onnx.export(
        Exported(student),
        args,
        str(target),
        input_names=[GEN_IN, F0_IN, "style"],
        output_names=list(OUTPUTS),
        dynamic_axes={GEN_IN: {2: "frames"}, F0_IN: {1: "frames"}, **{name: {2: "frames"} for name in OUTPUTS}},
        opset_version=17,
        dynamo=False,
    )
    if int8:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(target), str(out), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])
    import onnx

    model = onnx.load(str(out))
    meta = model.metadata_props.add()
    meta.key, meta.value = "rtts.student_step", str(state["step"])
    onnx.save(model, str(out))
    print(f"{out}: step {state['step']}, {out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--int8", action="store_true")
    a = ap.parse_args()
    export(a.checkpoint, a.out, a.int8)
