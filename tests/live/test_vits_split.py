"""Cutting VITS voices into encoder and decoder, and decoding the latent in windows."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from rtts.engines.base import VoiceInfo
from rtts.engines.piper import (
    DECODE_MARGIN,
    FIRST_WINDOW,
    LATER_WINDOW,
    MAX_WINDOW,
    WINDOW_GROWTH,
    PiperEngine,
    first_window,
    next_window,
    window_bounds,
)
from rtts.engines.vits_split import SplitError, split_vits
from rtts.engines.voices import VoiceRegistry


def _weights(seed: int):  # type: ignore[no-untyped-def]
    """make(name, *shape): a random float initializer, reproducible from ``seed``."""
    rng = np.random.default_rng(seed)

    def make(name: str, *shape: int) -> onnx.TensorProto:
        return helper.make_tensor(name, TensorProto.FLOAT, shape, rng.standard_normal(shape).astype(np.float32).ravel())

    return make


def _toy_vits(speakers: bool) -> onnx.ModelProto:
    """A graph with VITS's shape and meaningless names: x -> (encoder) -> z -> Conv -> up."""
    weight = _weights(0)
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["t0"], name="n0", pads=[1, 1]),  # "encoder"
        helper.make_node("Tanh", ["t0"], ["t1"], name="n1"),
        helper.make_node("Mul", ["t1", "mask"], ["t2"], name="n2"),  # z = ... * mask, as VITS does
        helper.make_node("Conv", ["t2", "w1"], ["t3"], name="n3", pads=[3, 3]),  # conv_pre
    ]
    inits = [weight("w0", 4, 3, 3), weight("w1", 5, 4, 7), weight("w2", 5, 2, 4), weight("w3", 1, 2, 3)]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "T"]),
        helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, "T"]),
    ]
    pre = "t3"
    if speakers:
        inputs.append(helper.make_tensor_value_info("sid", TensorProto.FLOAT, [1]))
        inits.append(weight("w4", 5, 1, 1))
        nodes += [
            helper.make_node("Reshape", ["sid", "shape"], ["g"], name="n4"),
            helper.make_node("Conv", ["g", "w4"], ["c"], name="n5"),  # cond(g), broadcast over time
            helper.make_node("Add", ["t3", "c"], ["t3c"], name="n6"),
        ]
        inits.append(helper.make_tensor("shape", TensorProto.INT64, [3], [1, 1, 1]))
        pre = "t3c"
    nodes += [
        helper.make_node("LeakyRelu", [pre], ["t4"], name="n7", alpha=0.1),
        helper.make_node("ConvTranspose", ["t4", "w2"], ["t5"], name="n8", strides=[2]),
        helper.make_node("Conv", ["t5", "w3"], ["y"], name="n9", pads=[1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "toy", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, "S"])], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


@pytest.mark.parametrize("speakers", [False, True])
def test_the_cut_is_found_from_structure_not_names(speakers: bool) -> None:
    split = split_vits(_toy_vits(speakers))
    assert split.latent == "t2"  # the input of the Conv before the first upsampling
    assert split.decoder_inputs == (("t2", "sid") if speakers else ("t2",))
    assert split.hop == 2
    assert [o.name for o in split.encoder.graph.output] == ["t2"]
    assert {n.name for n in split.decoder.graph.node} >= {"n3", "n7", "n8", "n9"}
    assert "n0" not in {n.name for n in split.decoder.graph.node}


def test_graphs_that_are_not_vits_are_refused() -> None:
    model = _toy_vits(False)
    del model.graph.node[-2]  # no ConvTranspose
    model.graph.node[-1].input[0] = "t4"
    with pytest.raises(SplitError):
        split_vits(model)
    # A decoder that needs a time-shaped input besides z cannot be windowed.
    model = _toy_vits(False)
    model.graph.node[-1].op_type = "Add"
    del model.graph.node[-1].attribute[:]
    model.graph.node[-1].input[:] = ["t5", "mask"]
    with pytest.raises(SplitError):
        split_vits(model)


def test_window_bounds_tile_the_latent() -> None:
    for frames in (1, 5, FIRST_WINDOW, 37, 500):
        bounds = window_bounds(frames)
        assert bounds[0][0] == 0 and bounds[-1][1] == frames
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert window_bounds(500)[0] == (0, FIRST_WINDOW)


def test_a_window_is_as_long_as_the_audio_in_hand_can_pay_for() -> None:
    cost = 0.0005  # s per latent frame
    # A listener waiting (no time to spare): the short first window; later ones do not
    # shrink below LATER_WINDOW, which would only fall further behind.
    assert next_window(0, 300, 0, -0.01, cost) == FIRST_WINDOW
    assert next_window(0, 300, 0, 0.0, cost) == FIRST_WINDOW
    assert next_window(10, 300, 10, -0.01, cost) == 10 + LATER_WINDOW
    # 0.05 s pays for 100 frames, margins included.
    assert next_window(0, 300, 0, 0.05, cost) == 100 - 2 * DECODE_MARGIN
    # Growth is capped: fourfold the window before, and MAX_WINDOW.
    assert next_window(10, 300, 10, 1.0, cost) == 10 + 10 * WINDOW_GROWTH
    assert next_window(0, 1000, 0, 10.0, cost) == MAX_WINDOW
    # A remainder under half a window is folded in: a later sentence in one window.
    assert next_window(0, 300, 0, 10.0, cost) == 300
    assert next_window(290, 300, 200, 0.0, cost) == 300


def test_a_first_window_leaves_the_listener_enough_for_the_second() -> None:
    hop_s = 256 / 22050
    # A fast box: the second window is cheap, and FIRST_WINDOW is enough.
    assert first_window(0.00005, hop_s) == FIRST_WINDOW
    # Slower boxes open with more audio: what the first window leaves the listener, past
    # what the trim and the resampler hold back, pays for the second window three times.
    sizes = [first_window(cost, hop_s) for cost in (0.0004, 0.0008, 0.0016)]
    assert sizes == sorted(sizes) and sizes[0] > FIRST_WINDOW and sizes[-1] > 2 * FIRST_WINDOW
    for cost, size in zip((0.0004, 0.0008, 0.0016), sizes):
        second_s = (LATER_WINDOW + 2 * DECODE_MARGIN) * cost
        assert size * hop_s - 0.09 >= 3 * second_s
    # The window the listener waits for is that long; a later one is not.
    assert next_window(0, 300, 0, -0.01, 0.0008, sizes[1]) == sizes[1]
    assert next_window(40, 300, 20, -0.01, 0.0008, sizes[1]) == 40 + LATER_WINDOW


@pytest.fixture(scope="module")
def piper(tmp_path_factory: pytest.TempPathFactory) -> tuple[PiperEngine, VoiceInfo]:
    registry = VoiceRegistry.discover(None, tmp_path_factory.mktemp("cache"), threads=2)
    voice = registry.voices["piper/en_US-joe-medium"]
    engine = registry.engine_for(voice)
    assert isinstance(engine, PiperEngine)
    engine.load()
    return engine, voice


@pytest.mark.slow
def test_windowed_decoding_matches_one_shot(piper: tuple[PiperEngine, VoiceInfo]) -> None:
    engine, _ = piper
    assert engine.streaming, "the built-in voice must be cut into encoder and decoder"
    assert engine.hop == 256
    from rtts.engines.piper import phoneme_ids

    ids = phoneme_ids(engine.phonemize("Windowed decoding must sound exactly like decoding at once."), engine.config)
    # VITS draws all of its noise in the encoder, so one latent feeds both decodings.
    latent = engine.encode(ids, None, 1.0)
    whole = engine.decode(latent, None)
    pieces = list(engine.decode_windows(latent, None))
    windowed = np.concatenate(pieces)
    assert len(pieces) >= 3 and windowed.shape == whole.shape
    diff = float(np.max(np.abs(windowed - whole)))
    snr = 10 * np.log10(np.sum(whole.astype(np.float64) ** 2) / max(np.sum((windowed - whole).astype(np.float64) ** 2), 1e-30))
    print(f"windowed vs one-shot ({len(pieces)} windows, margin {DECODE_MARGIN}): max abs diff {diff:.2e}, SNR {snr:.1f} dB")
    assert diff < 1e-4 and snr > 90
    # Without margins the seams would be audible: the test can tell the difference.
    bare = np.concatenate([engine.decode(latent[:, :, a:b], None) for a, b in window_bounds(latent.shape[-1])])
    assert np.max(np.abs(bare - whole)) > 100 * diff


@pytest.mark.slow
def test_piper_streams_inside_a_sentence(piper: tuple[PiperEngine, VoiceInfo]) -> None:
    engine, voice = piper
    chunks = list(engine.synthesize("One long sentence is streamed in several pieces as it is decoded.", voice, "en", 1.0))
    assert len(chunks) >= 3
    assert len(chunks[0]) < 0.5 * engine.sample_rate  # the first piece is one short window
    audio = np.concatenate(chunks)
    assert 2.0 < len(audio) / engine.sample_rate < 8.0
    assert np.max(np.abs(audio)) <= 1.0


@pytest.mark.slow
def test_a_sentence_after_audio_in_hand_is_decoded_in_bigger_windows(piper: tuple[PiperEngine, VoiceInfo]) -> None:
    engine, voice = piper
    text = "A later sentence of a paragraph starts while the one before it still plays."
    waiting = list(engine.synthesize(text, voice, "en", 1.0, lead_s=0.0))
    in_hand = list(engine.synthesize(text, voice, "en", 1.0, lead_s=3.0))
    assert len(waiting) >= 3 and len(waiting[0]) < 0.2 * engine.sample_rate
    assert len(in_hand) <= 2 and len(in_hand[0]) > 1.0 * engine.sample_rate


@pytest.mark.slow
def test_the_cut_is_kept_on_disk_and_reused(piper: tuple[PiperEngine, VoiceInfo], tmp_path) -> None:  # type: ignore[no-untyped-def]
    from rtts.engines.vits_flow import FLOW
    from rtts.engines.vits_split import SPLIT

    engine, _ = piper
    first = PiperEngine(engine.key, engine.model_path, engine.config, threads=1, cache_dir=tmp_path)
    first.load()
    files = SPLIT.files(engine.model_path, tmp_path)
    # The encoder half is cut once more, before its flow (vits_flow).
    files += FLOW.files(files[0], tmp_path)
    assert first.streaming and first._prior is not None and all(f.is_file() for f in files)
    stamps = [f.stat().st_ino for f in files]  # a cut made again would be new files
    again = PiperEngine(engine.key, engine.model_path, engine.config, threads=1, cache_dir=tmp_path)
    again.load()
    assert again.streaming and [f.stat().st_ino for f in files] == stamps
    assert again.hop == first.hop == 256


def _toy_encoder(speakers: bool = False) -> onnx.ModelProto:
    """A graph with a VITS encoder's shape: durations' noise upstream, then the prior
    (mean + noise · σ · scale) and a flow of Convs masked along time."""
    weight = _weights(1)
    nodes = [
        helper.make_node("RandomNormalLike", ["x"], ["dp_noise"], name="dp0"),  # the duration predictor's
        helper.make_node("Add", ["x", "dp_noise"], ["h"], name="dp1"),
        helper.make_node("Conv", ["h", "w0"], ["m"], name="e0", pads=[1, 1]),
        helper.make_node("Conv", ["h", "w1"], ["logs"], name="e1", pads=[1, 1]),
        helper.make_node("RandomNormalLike", ["m"], ["noise"], name="p0"),
        helper.make_node("Exp", ["logs"], ["sigma"], name="p1"),
        helper.make_node("Mul", ["noise", "sigma"], ["p2o"], name="p2"),
        helper.make_node("Mul", ["p2o", "scale"], ["p3o"], name="p3"),
        helper.make_node("Add", ["m", "p3o"], ["zp"], name="p4"),
        helper.make_node("Conv", ["zp", "wf0"], ["f0"], name="f0", pads=[2, 2]),  # reach 2
        helper.make_node("Mul", ["f0", "mask"], ["f1"], name="f1"),
        helper.make_node("Conv", ["f1", "wf1"], ["f2"], name="f2", pads=[6, 6], dilations=[3]),  # reach 6
    ]
    inits = [weight(n, 4, 3, 3) for n in ("w0", "w1")] + [weight("wf0", 4, 4, 5), weight("wf1", 4, 4, 5)]
    inits.append(helper.make_tensor("scale", TensorProto.FLOAT, [], [0.667]))
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "T"]),
        helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, "T"]),
    ]
    last = "f2"
    if speakers:
        inputs.append(helper.make_tensor_value_info("sid", TensorProto.FLOAT, [1]))
        nodes += [
            helper.make_node("Reshape", ["sid", "shape"], ["g"], name="g0"),
            helper.make_node("Add", ["f2", "g"], ["f3"], name="g1"),  # conditioning, broadcast over time
        ]
        inits.append(helper.make_tensor("shape", TensorProto.INT64, [3], [1, 1, 1]))
        last = "f3"
    nodes.append(helper.make_node("Mul", [last, "mask"], ["z"], name="f4"))
    graph = helper.make_graph(
        nodes, "toy", inputs, [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, "T"])], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


@pytest.mark.parametrize("speakers", [False, True])
def test_the_flow_is_found_where_the_noise_joins_the_prior(speakers: bool) -> None:
    from rtts.engines.vits_flow import cut_flow

    prior, flow, meta = cut_flow(_toy_encoder(speakers))
    assert (meta["z_p"], meta["mask"], meta["latent"]) == ("zp", "mask", "z")
    assert meta["flow_inputs"] == (["zp", "mask", "sid"] if speakers else ["zp", "mask"])
    assert meta["margin"] == 2 + 6 + 8  # the Convs' reach, plus slack
    flow_nodes = {n.name for n in flow.graph.node}
    assert {"f0", "f1", "f2", "f4"} <= flow_nodes and not flow_nodes & {"p0", "dp0", "e0"}
    assert [o.name for o in prior.graph.output] == ["zp", "mask"]


def test_an_encoder_without_the_priors_noise_is_not_cut() -> None:
    from rtts.engines.vits_flow import cut_flow

    model = _toy_encoder()
    for node in model.graph.node:
        if node.op_type == "RandomNormalLike":
            node.op_type, node.input[:] = "Identity", [node.input[0]]
    with pytest.raises(SplitError):
        cut_flow(model)


@pytest.mark.slow
def test_the_flow_in_two_windows_matches_the_whole_flow(piper: tuple[PiperEngine, VoiceInfo]) -> None:
    engine, _ = piper
    assert engine._prior is not None, "the built-in voice's encoder must be cut before its flow"
    from rtts.engines.piper import phoneme_ids

    ids = phoneme_ids(engine.phonemize("The first window needs the flow over its own frames only."), engine.config)
    z_p, mask, _ = engine.prior(ids, None, 1.0)
    frames = z_p.shape[-1]
    whole = engine.flow(z_p, mask, None, 0, frames)
    head = FIRST_WINDOW + DECODE_MARGIN
    parts = np.concatenate([engine.flow(z_p, mask, None, 0, head), engine.flow(z_p, mask, None, head, frames)], axis=-1)
    diff = float(np.max(np.abs(parts - whole)))
    print(f"flow in two windows vs whole ({frames} frames, margin {engine._flow_margin}): max abs diff {diff:.2e} of {np.max(np.abs(whole)):.1f}")
    assert diff < 1e-5 * max(1.0, float(np.max(np.abs(whole))))
    # Without its context the flow's windows would not join: the test can tell.
    margin, engine._flow_margin = engine._flow_margin, 0
    try:
        bare = np.concatenate([engine.flow(z_p, mask, None, 0, head), engine.flow(z_p, mask, None, head, frames)], axis=-1)
    finally:
        engine._flow_margin = margin
    assert np.max(np.abs(bare - whole)) > 100 * diff


@pytest.mark.slow
def test_new_cutting_code_cuts_again_retries_a_failure_and_removes_what_it_replaces(  # type: ignore[no-untyped-def]
    piper: tuple[PiperEngine, VoiceInfo], tmp_path, monkeypatch
) -> None:
    import json
    import os
    import time

    from rtts.cache import REPLACED_S
    from rtts.engines.graph_cut import Cut
    from rtts.engines.vits_split import SPLIT, cached_split

    model = piper[0].model_path
    # A failure remembered by an earlier version of the cutting code ...
    monkeypatch.setattr(Cut, "recipe", lambda self: "0ld0ld0ld0ld")
    _, _, failed = SPLIT.files(model, tmp_path)
    failed.parent.mkdir(parents=True)
    failed.write_text(json.dumps({"error": "the old code could not cut it", "source": str(model)}))
    with pytest.raises(SplitError, match="old code"):
        cached_split(model, tmp_path)  # remembered while the code is the same
    # ... and a cut by a build that named cuts by size and mtime only.
    legacy = [failed.parent / f"{model.stem}-1-2.{end}" for end in ("encoder.onnx", "decoder.onnx", "json")]
    legacy[2].write_text(json.dumps({"latent": "z", "decoder_inputs": ["z"], "hop": 256}))
    for path in legacy[:2]:
        path.write_bytes(b"old")
    # New code: cut again, for real. The failure and the earlier build's cut stay while
    # another version of rtts might still use them ...
    monkeypatch.setattr(Cut, "recipe", lambda self: "n3wn3wn3wn3w")
    encoder, decoder, meta = cached_split(model, tmp_path)
    assert meta["hop"] == 256 and encoder.stat().st_size > 1000
    # Whole seconds, what an image layer keeps: the encoder's own cut is named by its mtime.
    assert encoder.stat().st_mtime_ns % 10**9 == 0 and decoder.stat().st_mtime_ns % 10**9 == 0
    kept = sorted(p.name for p in SPLIT.files(model, tmp_path))
    assert sorted(p.name for p in failed.parent.iterdir()) == sorted([*kept, failed.name, *(p.name for p in legacy)])
    # ... until unused for a week.
    week_ago = time.time() - REPLACED_S - 60
    for path in (failed, legacy[2]):
        os.utime(path, (week_ago, week_ago))
    cached_split(model, tmp_path)
    assert sorted(p.name for p in failed.parent.iterdir()) == kept
