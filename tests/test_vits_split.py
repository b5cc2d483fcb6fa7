"""Cutting VITS voices into encoder and decoder, and decoding the latent in windows."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from rtts.engines.base import VoiceInfo
from rtts.engines.piper import DECODE_MARGIN, FIRST_WINDOW, PiperEngine, window_bounds
from rtts.engines.vits_split import SplitError, split_vits
from rtts.voices import VoiceRegistry


def _toy_vits(speakers: bool) -> onnx.ModelProto:
    """A graph with VITS's shape and meaningless names: x -> (encoder) -> z -> Conv -> up."""
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return helper.make_tensor(name, TensorProto.FLOAT, shape, rng.standard_normal(shape).astype(np.float32).ravel())

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
def test_the_cut_is_kept_on_disk_and_reused(piper: tuple[PiperEngine, VoiceInfo], tmp_path) -> None:  # type: ignore[no-untyped-def]
    from rtts.engines.vits_split import split_files

    engine, _ = piper
    first = PiperEngine(engine.key, engine.model_path, engine.config, threads=1, cache_dir=tmp_path)
    first.load()
    files = split_files(engine.model_path, tmp_path)
    assert first.streaming and all(f.is_file() for f in files)
    stamps = [f.stat().st_mtime_ns for f in files]
    again = PiperEngine(engine.key, engine.model_path, engine.config, threads=1, cache_dir=tmp_path)
    again.load()
    assert again.streaming and [f.stat().st_mtime_ns for f in files] == stamps
    assert again.hop == first.hop == 256
