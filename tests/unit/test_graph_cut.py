"""Which kept cuts graph_cut removes (rtts/engines/graph_cut.py), on files alone."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from rtts.cache import REPLACED_S
from rtts.engines.graph_cut import Cut, _prune


def _cut(folder: Path, stem: str, source: Path | None, age_s: float = 0.0) -> list[Path]:
    files = [folder / f"{stem}.a.onnx", folder / f"{stem}.b.onnx", folder / f"{stem}.json"]
    for path in files[:2]:
        path.write_bytes(b"half")
    files[2].write_text(json.dumps({} if source is None else {"source": str(source)}))
    then = time.time() - age_s
    os.utime(files[2], (then, then))
    return files


def test_cuts_nothing_will_load_again_are_removed(tmp_path: Path) -> None:
    model, other = tmp_path / "m.onnx", tmp_path / "other.onnx"
    model.write_bytes(b"model")
    other.write_bytes(b"model")
    folder = tmp_path / "cuts"
    folder.mkdir()
    week = REPLACED_S + 60
    kept = _cut(folder, "m-new", model)
    recent_other_recipe = _cut(folder, "m-old", model)  # another version of rtts may still use it
    old_other_recipe = _cut(folder, "m-older", model, age_s=week)
    orphan = _cut(folder, "enc-x", tmp_path / "gone.encoder.onnx")  # its model was removed
    legacy_recent, legacy_old = _cut(folder, "m-1-2", None), _cut(folder, "m-3-4", None, age_s=week)
    unrelated = _cut(folder, "other-1", other, age_s=week)  # another model's: not ours to judge
    _prune(kept[2], model)
    left = {p.name for p in folder.iterdir()}
    assert left == {p.name for p in (*kept, *recent_other_recipe, *legacy_recent, *unrelated)}
    assert not {p.name for p in (*old_other_recipe, *orphan, *legacy_old)} & left


def test_a_cut_is_named_by_its_model_and_recipe(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model = tmp_path / "voice.onnx"
    model.write_bytes(b"model")
    cut = Cut("rtts.engines.vits_split", "piper-split", ("encoder", "decoder"))
    first = cut.files(model, tmp_path)
    assert cut.recipe() in first[2].name and first[0].name.startswith("voice-")
    monkeypatch.setattr(Cut, "recipe", lambda self: "changedcode0")
    assert cut.files(model, tmp_path)[2] != first[2]  # new cutting code: a new name, cut again


def test_a_recipe_is_worked_out_again_only_when_a_file_it_reads_changes(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A recipe is asked at every load (a wake's too), so it is kept per process: hashing
    the student's 6 MB again was 10 ms of a wake's path. A data file that changes (size or
    mtime) makes a new one."""
    data = tmp_path / "student.onnx"
    data.write_bytes(b"weights")
    cut = Cut("rtts.engines.vits_split", "piper-split", ("encoder", "decoder"), data=(data,))
    reads = []
    original = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.append(self.name) or original(self))
    first = cut.recipe()
    assert cut.recipe() == first and reads.count("student.onnx") == 1  # the second answer kept
    data.write_bytes(b"other weights")
    assert cut.recipe() != first and reads.count("student.onnx") == 2
    os.utime(data, ns=(1_796_000_000_000_000_000,) * 2)
    assert reads.count("student.onnx") == 2 and cut.recipe() and reads.count("student.onnx") == 3


def test_whole_second_leaves_nothing_for_an_image_layer_to_change(tmp_path: Path) -> None:
    """A model file rtts makes loses its mtime's fraction (.6 s here: docker would truncate
    it, podman round it up), so both keep its mtime, and the names made from it."""
    from rtts.engines.graph_cut import whole_second

    model = tmp_path / "voice.onnx"
    model.write_bytes(b"model")
    os.utime(model, ns=(1_796_000_000_600_000_000,) * 2)
    whole_second(model)
    assert model.stat().st_mtime_ns == 1_796_000_000_000_000_000
