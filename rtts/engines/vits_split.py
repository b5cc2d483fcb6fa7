"""Cutting a single-file VITS (Piper) voice into its encoder and HiFi-GAN decoder.

A Piper ``.onnx`` runs text encoder, duration predictor, flow and decoder in one
call, so nothing can be played before the whole sentence is decoded. The decoder is
a stack of convolutions over the latent ``z`` (1 x C x frames); cut there, the
encoder runs once per sentence and the decoder can run over overlapping windows of
``z``, so the first audio leaves after the encoder plus one short window.

The cut is found from the graph's structure, not from tensor names (which differ
between exports): the decoder is where the upsampling starts, so walk back from the
first ``ConvTranspose`` through the elementwise ops before it to the first ``Conv``;
that Conv's data input is ``z``. The cut is only accepted when the decoder then
depends on nothing but ``z`` and, for multi-speaker voices, the speaker id input.

The encoder gives the duration predictor's frames per phoneme id too (for word
timing), where it finds them: VITS rounds them up (``w_ceil = ceil(w)``) before it
expands the text along time by their running sum (``generate_path``), so they are
the ``Ceil`` that feeds a ``CumSum``.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rtts.engines.graph_cut import Cut, write_cut

if TYPE_CHECKING:  # imported where used: see "the cut, kept on disk" below
    import onnx

__all__ = ["SPLIT", "SplitError", "VitsSplit", "ancestors", "cached_split", "find_durations", "split_vits"]

logger = logging.getLogger(__name__)

# Ops that may sit between the decoder's first Conv and its first upsampling:
# the activation, and an Add of the speaker conditioning (``conv_pre(z) + cond(g)``).
_PASS_THROUGH = frozenset({"LeakyRelu", "Relu", "Add", "Mul", "Identity"})


class SplitError(ValueError):
    """The graph does not have the shape of a VITS encoder followed by a HiFi-GAN decoder."""


@dataclass(frozen=True)
class VitsSplit:
    encoder: onnx.ModelProto  # the voice's inputs -> latent
    decoder: onnx.ModelProto  # latent (+ speaker inputs) -> the voice's output
    latent: str  # name of the cut tensor; the encoder's first output, the decoder's first input
    decoder_inputs: tuple[str, ...]  # latent first, then graph inputs the decoder also needs
    hop: int  # output samples per latent frame
    durations: str | None = None  # the encoder's second output (1 x 1 x ids: frames each), if found


def split_vits(model: onnx.ModelProto) -> VitsSplit:
    """Split ``model`` in memory; raise SplitError when it is not a VITS-shaped graph."""
    import onnx
    from onnx import helper

    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    initializers = {init.name for init in graph.initializer}
    graph_inputs = [i.name for i in graph.input if i.name not in initializers]
    if len(graph.output) != 1:
        raise SplitError(f"expected one output, found {len(graph.output)}")
    output = graph.output[0].name

    latent = _find_latent(graph, producer, initializers)
    # Walk back from the output to everything the decoder needs, stopping at the cut.
    needs: set[str] = set()
    stack = [output]
    seen: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen or name == latent or name in initializers or not name:
            continue
        seen.add(name)
        node = producer.get(name)
        if node is None:
            needs.add(name)  # a graph input
            continue
        stack.extend(node.input)
    if latent not in ancestors(output, producer, initializers):
        raise SplitError(f"the output does not depend on {latent!r}")
    extra = sorted(needs)
    # Besides z the decoder may take per-utterance constants (a speaker id: rank <= 1),
    # never anything laid out along time, which a window of z would not match.
    ranks = {i.name: len(i.type.tensor_type.shape.dim) for i in graph.input}
    if any(ranks.get(i, 99) > 1 for i in extra):
        raise SplitError(f"the decoder would also need {extra}; only z and per-utterance inputs may cross the cut")

    if latent not in {v.name for v in graph.value_info}:
        # The extractor names the cut from shape inference, which can miss a tensor.
        model = onnx.ModelProto.FromString(model.SerializeToString())
        model.graph.value_info.append(helper.make_tensor_value_info(latent, onnx.TensorProto.FLOAT, None))
    durations = find_durations(graph)
    extractor = onnx.utils.Extractor(model)
    encoder = extractor.extract_model(graph_inputs, [latent] if durations is None else [latent, durations])
    decoder = extractor.extract_model([latent, *extra], [output])
    return VitsSplit(encoder, decoder, latent, (latent, *extra), _hop(graph), durations)


def find_durations(graph: onnx.GraphProto) -> str | None:
    """The frames of each input id: the one ``Ceil`` whose output feeds a ``CumSum``."""
    cumsum_inputs = {i for n in graph.node if n.op_type == "CumSum" for i in n.input}
    found = [n.output[0] for n in graph.node if n.op_type == "Ceil" and n.output[0] in cumsum_inputs]
    return found[0] if len(found) == 1 else None


def _find_latent(graph: onnx.GraphProto, producer: dict[str, onnx.NodeProto], initializers: set[str]) -> str:
    first_up = next((n for n in graph.node if n.op_type == "ConvTranspose"), None)
    if first_up is None:
        raise SplitError("no ConvTranspose: not a HiFi-GAN decoder")
    node = first_up
    for _ in range(16):
        source = node.input[0]
        before = producer.get(source)
        if before is None:
            raise SplitError(f"{source!r} before the first upsampling is not computed in the graph")
        if before.op_type == "Conv":
            return before.input[0]
        if before.op_type not in _PASS_THROUGH:
            raise SplitError(f"unexpected {before.op_type} before the decoder's first upsampling")
        if before.op_type in ("Add", "Mul"):
            # Both branches may be Convs: conv_pre over z, and the speaker conditioning
            # over an embedding of the speaker id. z is the one that depends on more of
            # the graph (the whole encoder), not just on one input.
            convs = [producer[i] for i in before.input if i in producer and producer[i].op_type == "Conv"]
            if not convs:
                node = before
                continue
            best = max(convs, key=lambda c: len(ancestors(c.input[0], producer, initializers)))
            return best.input[0]
        node = before
    raise SplitError("no Conv found before the first upsampling")


def ancestors(name: str, producer: dict[str, onnx.NodeProto], initializers: set[str]) -> set[str]:
    """``name`` and every tensor it is computed from (initializers left out)."""
    out: set[str] = set()
    stack = [name]
    while stack:
        current = stack.pop()
        if current in out or current in initializers:
            continue
        out.add(current)
        node = producer.get(current)
        if node is not None:
            stack.extend(i for i in node.input if i)
    return out


def _hop(graph: onnx.GraphProto) -> int:
    """Samples per latent frame: the product of the upsampling strides."""
    from onnx import helper

    hop = 1
    for node in graph.node:
        if node.op_type == "ConvTranspose":
            for attr in node.attribute:
                if attr.name == "strides":
                    for stride in helper.get_attribute_value(attr):
                        hop *= int(stride)
    return hop


# ---------------------------------------------------------------- the cut, kept on disk
#
# Made once by a child process (``python -m rtts.engines.vits_split MODEL FIRST SECOND META``), so the
# server never imports ``onnx``; see ``graph_cut``.

SPLIT = Cut("rtts.engines.vits_split", "piper-split", ("encoder", "decoder"))


def cached_split(model: Path, cache_dir: Path) -> tuple[Path, Path, dict]:
    """The cached halves and description of ``model``, cutting it in a child process first if needed.

    Raises SplitError when the voice cannot be cut (remembered until the cutting code
    changes), OSError when the cache cannot be written.
    """
    return SPLIT.cached(model, cache_dir, SplitError)


def _cut(model: onnx.ModelProto) -> tuple[onnx.ModelProto, onnx.ModelProto, dict]:
    split = split_vits(model)
    meta = {
        "latent": split.latent, "decoder_inputs": list(split.decoder_inputs), "hop": split.hop,
        "durations": split.durations,
    }  # fmt: skip
    return split.encoder, split.decoder, meta


if __name__ == "__main__":
    write_cut(sys.argv[1:], _cut, SplitError)
