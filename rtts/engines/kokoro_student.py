"""Kokoro's waveform generator, distilled (issue 31): a small student in place of the
teacher's iSTFTNet generator, with Hibari's DSP back end.

Kokoro's decoder ends in a HiFi-GAN-class generator that is 96 % of its cost. The student
(``models/kokoro-student.onnx``, trained by ``training/kokoro_student``) takes what that
generator takes, the decode blocks' output (``GEN_IN``: 512 channels at 80 frames a
second), the predictor's F0 and the style, and gives the five spectra ``hibari.dsp``
turns into 24 kHz audio (a pulse train from the teacher's own F0, so Mandarin's tones
come from Kokoro's predictor, not from the student).

The decoder the engine runs with the student is the teacher's decoder up to ``GEN_IN``
(its decode blocks, ~4 % of the whole) joined to the student in one graph, made once
in a child process and kept in the cache directory like every cut (``graph_cut``),
named by the student file's bytes too. It runs, with the DSP, in the inference process
(``student_work``): only the audio crosses the pipe, not five spectra per frame.

    python -m rtts.engines.kokoro_student DECODER JOINED META   # the child's side of the cut
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rtts.engines.graph_cut import Cut, write_cut
from rtts.engines.kokoro_tensors import ENERGY, F0, FEATURES
from rtts.engines.student_work import OUTPUTS

__all__ = [
    "GENERATORS",
    "GEN_IN",
    "STUDENT_FILE",
    "StudentError",
    "cached_student_decoder",
    "student_file",
    "student_langs",
]

GEN_IN = "/decoder/decoder/decode.3/Div_4_output_0"  # the generator's input in Kokoro v1.0's decoder
STUDENT_FILE = "kokoro-student.onnx"
# Beside it: {"langs": [...]}, the languages where the student passed the quality gates
# against the teacher (docs/benchmarks.md), which "auto" gives it.
GATES_FILE = "kokoro-student.json"
GENERATORS = ("auto", "student", "teacher")
ALL_LANGS = ("en", "en-gb", "zh", "ja", "es", "fr", "it", "pt-br")


class StudentError(ValueError):
    """The decoder or the student is not what the join was made for."""


def student_file() -> Path | None:
    """The student rtts ships (models/ in a checkout, rtts/_models/ in the wheel), or None."""
    from rtts.engines.voicepacks import _data_dir

    path = _data_dir() / STUDENT_FILE
    return path if path.is_file() else None


def student_langs(generator: str) -> frozenset[str]:
    """The languages the student speaks under ``generator`` (one of GENERATORS)."""
    if generator not in GENERATORS:
        raise ValueError(f"generator must be one of {', '.join(GENERATORS)}, not {generator!r}")
    if generator == "teacher" or student_file() is None:
        return frozenset()
    if generator == "student":
        return frozenset(ALL_LANGS)
    import json

    from rtts.engines.voicepacks import _data_dir

    try:
        return frozenset(json.loads((_data_dir() / GATES_FILE).read_text(encoding="utf-8"))["langs"]) & set(ALL_LANGS)
    except (OSError, ValueError, KeyError, TypeError):
        return frozenset()


def _cut() -> Cut:
    student = student_file()
    return Cut(
        "rtts.engines.kokoro_student",
        "kokoro-student",
        ("decoder",),
        data=(student,) if student is not None else (),
        packages=("onnx",),
    )


def join(decoder: Any, student: Any) -> tuple[Any, dict]:
    """One graph: ``decoder`` (Kokoro's cut decoder) up to ``GEN_IN``, then ``student``."""
    import onnx
    from onnx import compose, helper

    graph = decoder.graph
    if GEN_IN not in {out for node in graph.node for out in node.output}:
        raise StudentError(f"the decoder has no {GEN_IN}")
    if GEN_IN not in {v.name for v in graph.value_info}:
        graph.value_info.append(helper.make_tensor_value_info(GEN_IN, onnx.TensorProto.FLOAT, None))
    head = onnx.utils.Extractor(decoder).extract_model([FEATURES, F0, ENERGY, "style"], [GEN_IN])
    wanted = {GEN_IN, F0, "style"}
    if {i.name for i in student.graph.input} != wanted or [o.name for o in student.graph.output] != list(OUTPUTS):
        raise StudentError("the student's inputs or outputs are not the ones this join knows")
    student = compose.add_prefix(student, "student/", rename_inputs=False, rename_outputs=False)
    # One default-domain opset for both: the newer (the student's ops exist unchanged there);
    # and only the domains the joined nodes use (the native Snakes' stay behind with the generator).
    used = {node.domain for node in (*head.graph.node, *student.graph.node)}
    versions: dict[str, int] = {}
    for opset in (*head.opset_import, *student.opset_import):
        if opset.domain in used or opset.domain in ("", "ai.onnx"):
            versions[opset.domain] = max(versions.get(opset.domain, 0), opset.version)
    joined = helper.make_graph(
        [*head.graph.node, *student.graph.node],
        "kokoro-student-decoder",
        list(head.graph.input),
        list(student.graph.output),
        [*head.graph.initializer, *student.graph.initializer],
        value_info=[*head.graph.value_info, *student.graph.value_info],
    )
    model = helper.make_model(joined, opset_imports=[helper.make_opsetid(d, v) for d, v in versions.items()])
    model.ir_version = max(head.ir_version, student.ir_version)
    step = {p.key: p.value for p in student.metadata_props}.get("rtts.student_step")
    return model, {"student_step": step}


def _join_file(decoder: Any) -> tuple[Any, dict]:
    import onnx

    student = student_file()
    if student is None:
        raise StudentError("this install has no Kokoro student")
    return join(decoder, onnx.load(str(student)))


def cached_student_decoder(decoder: Path, cache_dir: Path) -> tuple[Path, dict]:
    """The teacher's ``decoder`` joined to the shipped student, kept in ``cache_dir``
    (made in a child process the first time); StudentError when it cannot be made."""
    joined, meta = _cut().cached(decoder, cache_dir, StudentError)
    return joined, meta


if __name__ == "__main__":
    write_cut(sys.argv[1:], _join_file, StudentError)
