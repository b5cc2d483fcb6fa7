"""Cutting a VITS (Piper) encoder once more, before its flow.

After ``vits_split`` the encoder still runs text encoder, duration predictor and the
normalizing flow in one call before any audio can be decoded, and the flow is the
costly part of it: it runs over every latent frame of the sentence (on joe-medium,
about half of the encoder's time for a 40-character unit). The flow is convolutions
along time too (coupling layers of dilated 1-D convolutions), so like the decoder it
can run over a window of frames with context on each side and give the same frames.
Cut before it, the first audio of an utterance needs the flow over its first window
only; the rest of the flow runs while that window plays.

The cut is found from the graph's structure, not from tensor names:
* the flow's input ``z_p`` is where VITS adds its noise to the prior: follow the
  last ``RandomNormalLike``'s elementwise chain (``noise · σ · scale``) to the Add of
  the mean;
* the flow then needs ``z_p``, the frame mask (the one tensor it takes from the
  encoder that depends on the text) and, for multi-speaker voices, the speaker id;
* its receptive field is the sum of its convolutions' reach, so a window with that
  much context on each side is exact (tests/live/test_vits_split.py measures it).

An encoder that gives the durations as well (``vits_split``) has the prior give them.

Made once by a child process (``python -m rtts.engines.vits_flow ENCODER FIRST SECOND META``), like
the first cut; see ``graph_cut``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rtts.engines.graph_cut import Cut, write_cut
from rtts.engines.vits_split import SplitError, ancestors

if TYPE_CHECKING:
    import onnx

__all__ = ["FLOW", "cached_flow_cut", "cut_flow"]

# ancestors() from vits_split takes part in this cut.
FLOW = Cut("rtts.engines.vits_flow", "piper-flow", ("prior", "flow"), uses=("rtts.engines.vits_split",))
_CHAIN = frozenset({"Mul", "Add", "Identity", "Cast"})
# Frames of context added to the measured receptive field, for safety.
_SLACK = 8


def cut_flow(model: onnx.ModelProto) -> tuple[onnx.ModelProto, onnx.ModelProto, dict]:
    """Split a VITS encoder (text ids -> latent) into prior (-> z_p, mask) and flow."""
    import onnx
    from onnx import helper

    graph = model.graph
    if len(graph.output) not in (1, 2):
        raise SplitError(f"expected the latent (and the durations), found {len(graph.output)} outputs")
    latent = graph.output[0].name
    durations = [o.name for o in graph.output[1:]]
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    initializers = {init.name for init in graph.initializer}
    ranks = {i.name: len(i.type.tensor_type.shape.dim) for i in graph.input}

    z_p = _noisy_prior(graph, consumers, latent, producer, initializers)
    # The flow: every node after z_p on a path to the latent.
    after = _descendants(z_p, consumers)
    before_latent = ancestors(latent, producer, initializers)
    flow_nodes = [n for n in graph.node if any(o in after and o in before_latent for o in n.output)]
    made = {o for n in flow_nodes for o in n.output}
    crossing = sorted({i for n in flow_nodes for i in n.input if i and i not in made and i not in initializers} - {z_p})
    # What crosses is either laid out along time (the frame mask, derived from the
    # text) or per utterance (speaker conditioning, derived from rank <= 1 inputs).
    along_time, per_utterance = [], []
    for name in crossing:
        sources = {a for a in ancestors(name, producer, initializers) if a in ranks}
        (per_utterance if all(ranks[s] <= 1 for s in sources) else along_time).append(name)
    if len(along_time) != 1:
        raise SplitError(f"the flow takes {along_time or 'nothing'} besides z_p; expected one frame mask")
    (mask,) = along_time
    speaker_inputs = sorted({a for name in per_utterance for a in ancestors(name, producer, initializers) if a in ranks})
    if any(n.op_type.startswith("Random") for n in flow_nodes):
        raise SplitError("the flow would draw noise of its own")

    model = onnx.ModelProto.FromString(model.SerializeToString())
    known = {v.name for v in model.graph.value_info}
    for name in (z_p, mask):
        if name not in known:  # the extractor names the cut from shape inference
            model.graph.value_info.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    extractor = onnx.utils.Extractor(model)
    inputs = [i.name for i in graph.input if i.name not in initializers]
    prior = extractor.extract_model(inputs, [z_p, mask, *durations])
    flow = extractor.extract_model([z_p, mask, *speaker_inputs], [latent])
    meta = {
        "z_p": z_p,
        "mask": mask,
        "durations": durations[0] if durations else None,
        "latent": latent,
        "flow_inputs": [z_p, mask, *speaker_inputs],
        "margin": _reach(flow.graph) + _SLACK,
    }
    return prior, flow, meta


def _noisy_prior(
    graph: onnx.GraphProto,
    consumers: dict[str, list[onnx.NodeProto]],
    latent: str,
    producer: dict[str, onnx.NodeProto],
    initializers: set[str],
) -> str:
    """z_p: the sum of the prior's mean and its scaled noise, just before the flow."""
    noise = [n for n in graph.node if n.op_type in ("RandomNormalLike", "RandomNormal")]
    if not noise:
        raise SplitError("no RandomNormal: not a VITS encoder")
    # The duration predictor draws noise too, far upstream; the prior's is the last one.
    source = name = noise[-1].output[0]
    for _ in range(8):
        users = consumers.get(name, [])
        if len(users) != 1 or users[0].op_type not in _CHAIN:
            break
        node = users[0]
        others = [i for i in node.input if i and i != name]
        name = node.output[0]
        if node.op_type == "Add" and all(source not in ancestors(i, producer, initializers) for i in others):
            return name  # the mean plus the noise
    raise SplitError("could not follow the prior's noise to the flow's input")


def _descendants(name: str, consumers: dict[str, list[onnx.NodeProto]]) -> set[str]:
    out: set[str] = set()
    stack = [name]
    while stack:
        for node in consumers.get(stack.pop(), []):
            for o in node.output:
                if o not in out:
                    out.add(o)
                    stack.append(o)
    return out


def _reach(graph: onnx.GraphProto) -> int:
    """Frames of context one output frame depends on, per side: each Conv adds
    dilation x (kernel - 1) / 2. Summed over all Convs, which bounds the real reach
    (convolutions side by side count twice)."""
    from onnx import helper

    weights = {init.name: list(init.dims) for init in graph.initializer}
    reach = 0
    for node in graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        # kernel_shape may be left out: it is then the weight's last dimension.
        kernel = list(attrs.get("kernel_shape", weights.get(node.input[1], [1])))[-1]
        dilation = list(attrs.get("dilations", [1]))[-1]
        reach += dilation * (kernel - 1) // 2
    return reach


def cached_flow_cut(encoder: Path, cache_dir: Path) -> tuple[Path, Path, dict]:
    """The kept prior and flow of a cut Piper encoder, cut in a child process first if needed."""
    return FLOW.cached(encoder, cache_dir, SplitError)


if __name__ == "__main__":
    write_cut(sys.argv[1:], cut_flow, SplitError)
