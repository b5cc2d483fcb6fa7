"""``--zeroconf``: Home Assistant finds the Wyoming server by mDNS. Run in a network
namespace of its own (``unshare -n``: only a loopback, with multicast on), so no
packet leaves this machine: the real server announces, a zeroconf browser finds it,
and the wyoming client speaks to the address and port it found."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import _CACHE

pytestmark = pytest.mark.slow
pytest.importorskip("zeroconf")

ROOT = Path(__file__).resolve().parents[2]

INSIDE = r"""
import asyncio, subprocess, sys
for cmd in (["ip", "link", "set", "lo", "up"], ["ip", "link", "set", "lo", "multicast", "on"],
            ["ip", "route", "add", "224.0.0.0/4", "dev", "lo"]):
    subprocess.run(cmd, check=True)
from zeroconf import IPVersion
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe, Info

async def main():
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rtts", "serve", "--host", "127.0.0.1", "--port", "0", "--wyoming-port", "0",
        "--zeroconf", "--idle-unload", "0", "--models-dir", sys.argv[1], "--cache-dir", sys.argv[2])
    zc = AsyncZeroconf(interfaces=["127.0.0.1"], ip_version=IPVersion.V4Only)
    found = asyncio.Queue()
    browser = AsyncServiceBrowser(zc.zeroconf, "_wyoming._tcp.local.",
                                  handlers=[lambda zeroconf, service_type, name, state_change: found.put_nowait(name)])
    try:
        name = await asyncio.wait_for(found.get(), 60)
        info = AsyncServiceInfo("_wyoming._tcp.local.", name)
        assert await info.async_request(zc.zeroconf, 5000), name
        host, port = info.parsed_addresses()[0], info.port
        async with AsyncTcpClient(host, port) as client:
            await client.write_event(Describe().event())
            tts = Info.from_event(await asyncio.wait_for(client.read_event(), 30)).tts[0]
        print("FOUND", name, host, port, tts.name, len(tts.voices), flush=True)
    finally:
        await browser.async_cancel()
        await zc.async_close()
        server.terminate()
        await server.wait()

asyncio.run(main())
"""


def test_home_assistant_discovers_the_wyoming_server(tmp_path: Path) -> None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip (util-linux, iproute2) for a private network namespace")
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot make a network namespace here (needs root)")
    models = tmp_path / "models"
    models.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", INSIDE, str(models), str(_CACHE)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    line = next(x for x in run.stdout.splitlines() if x.startswith("FOUND"))
    _, name, host, port, program, voices = line.split()
    assert name.startswith("rtts-") and name.endswith("._wyoming._tcp.local.")
    assert host == "127.0.0.1" and int(port) > 0 and program == "rtts" and int(voices) >= 1
