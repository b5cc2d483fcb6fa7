"""A short soak in CI: benchmarks/soak.py with few clients for half a minute.

The full run (docs/reliability.md) uses more clients for longer; this one checks that
every kind of client action works against a real process and that fds, threads, tasks
and connections come back to their baseline afterwards."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

from tests.conftest import _CACHE

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def load_soak():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("soak", ROOT / "benchmarks" / "soak.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["soak"] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def test_short_soak():
    soak = load_soak()
    result = asyncio.run(soak.soak(clients=3, minutes=0.5, stall_s=3.0, cache_dir=_CACHE, warmup_s=0))
    assert set(result["actions"]) == set(soak.KINDS), result["actions"]  # every kind was tried
    assert result["unexpected"] == [] and result["server_log_problems"] == []
    assert result["stalled_dropped"] >= 1 and result["stalled_counted_by_server"] >= 1
    assert result["utterances"].get("done", 0) >= 3 and result["utterances"].get("cancelled", 0) >= 2
    assert result["expected_errors"].get("bad_frame", 0) >= 1
    assert result["connections_end"] == 0
    assert result["fds"]["end"] <= result["fds"]["baseline"] + 2
    assert result["threads"]["end"] <= result["threads"]["baseline"]
    assert result["tasks"]["end"] == result["tasks"]["baseline"]
    assert result["server_exit"] == 0
    assert result["ok"]
