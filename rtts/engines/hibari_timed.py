"""Hibari's model with its durations as an output, for word timing.

Hibari predicts how many frames each phoneme id lasts and expands its text along time
by their running sum (a ``CumSum``, then a ``Range`` compared with it), all inside the
one graph, whose outputs are only the spectra and F0. The durations are the tensor that
``CumSum`` sums; here they become one more output of the same graph, so a run gives
them with its audio, computed as before (nothing else of the graph changes, and the
spectra are the same: tests/live/test_word_timing_engines.py).

Made once by a child process (``python -m rtts.engines.hibari_timed MODEL TIMED META``),
like the cuts of the other models (``graph_cut``), so the inference process never imports
``onnx``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtts.engines.graph_cut import Cut, write_cut

if TYPE_CHECKING:
    import onnx

__all__ = ["TIMED", "TimedError", "cached_timed", "with_durations"]

TIMED = Cut("rtts.engines.hibari_timed", "hibari-timed", ("timed",))


class TimedError(ValueError):
    """The graph does not expand its text by one running sum of durations."""


def with_durations(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """``model`` (changed in place) with the frames of each input id as a last output."""
    from onnx import TensorProto, helper

    graph = model.graph
    sums = [n for n in graph.node if n.op_type == "CumSum"]
    if len(sums) != 1:
        raise TimedError(f"expected one CumSum (the length regulator), found {len(sums)}")
    durations = sums[0].input[0]
    producer = next((n for n in graph.node if durations in n.output), None)
    known = {v.name: v.type.tensor_type.elem_type for v in graph.value_info}
    elem = known.get(durations)
    if producer is not None and producer.op_type == "Cast":  # its type is what it casts to
        elem = next((a.i for a in producer.attribute if a.name == "to"), elem)
    if elem is None:
        raise TimedError(f"the type of the durations {durations!r} is not known")
    if elem not in (TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT):
        raise TimedError(f"the durations {durations!r} are not numbers of frames")
    graph.output.append(helper.make_tensor_value_info(durations, elem, None))
    return model, {"durations": durations, "outputs": len(graph.output)}


def cached_timed(model: Path, cache_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The kept timed model of ``model``, made by a child process first if needed; raises
    TimedError when it cannot be made (remembered until this code changes), OSError when
    the cache cannot be written."""
    timed, meta = TIMED.cached(model, cache_dir, TimedError)
    return timed, meta


if __name__ == "__main__":
    write_cut(sys.argv[1:], with_durations, TimedError)
