"""Load on a served tiny model (slow tier): 10,000 /classify requests from 512 concurrent clients.

    pytest -m slow tests/integration/launch/test_load.py -s      # prints the figures

No 5xx and no dropped connection; every 100th request carries an out-of-vocabulary id and must get
its 400 and nothing else; the server's resident memory after the run stays within a bound of what it
was after a warm-up round; /health answers afterwards.
"""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path

import httpx
import pytest

from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.process import ServerProcess, embedded_server_argv

REQUESTS, CONCURRENCY, WARMUP = 10_000, 512, 1_000
RSS_GROWTH_LIMIT_MB = 64  # after warm-up: allocator caches, not a leak (a leak of 1 KiB per request alone is 10 MB)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def _fire(url: str, count: int, offset: int) -> collections.Counter:
    import aiohttp

    outcomes: collections.Counter = collections.Counter()
    queue = iter(range(offset, offset + count))

    async def client(session):
        for i in queue:  # one shared iterator: each client takes the next request number
            poisoned = i % 100 == 99
            ids = [5, 99999999] if poisoned else [(7 * i + j) % 150 + 1 for j in range(4 + i % 24)]
            try:
                async with session.post(url + "/classify", json={"model": "m", "input": [ids]}) as resp:
                    await resp.read()
                    outcomes[("poisoned" if poisoned else "valid", resp.status)] += 1
            except aiohttp.ClientError as exc:
                outcomes[("error", type(exc).__name__)] += 1

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=300)) as session:
        await asyncio.gather(*(client(session) for _ in range(CONCURRENCY)))
    return outcomes


@pytest.mark.slow
def test_ten_thousand_requests_at_512_concurrency(random_disrm_path):
    argv = embedded_server_argv(
        str(random_disrm_path), "disrm", free_port(), extra=["--threads", "1", "--max-batch", "64"]
    )
    with ServerProcess.movable(argv) as server:
        pid = server.proc.pid
        start_mb = _rss_mb(pid)
        warm = asyncio.run(_fire(server.url, WARMUP, 0))
        warm_mb = _rss_mb(pid)
        t0 = time.perf_counter()
        out = asyncio.run(_fire(server.url, REQUESTS, WARMUP))
        seconds = time.perf_counter() - t0
        end_mb = _rss_mb(pid)
        health = httpx.get(server.url + "/health", timeout=10)
    print(
        f"\n{REQUESTS} requests at {CONCURRENCY} concurrency in {seconds:.1f} s ({REQUESTS / seconds:.0f}/s): {dict(out)}; "
        f"RSS {start_mb:.0f} MB at start, {warm_mb:.0f} MB after {WARMUP} warm-up, {end_mb:.0f} MB after "
        f"(+{end_mb - warm_mb:.1f} MB)"
    )
    assert sum(warm.values()) == WARMUP
    poisoned = REQUESTS // 100
    assert out == {("valid", 200): REQUESTS - poisoned, ("poisoned", 400): poisoned}  # no 5xx, no dropped connection
    assert end_mb - warm_mb < RSS_GROWTH_LIMIT_MB
    assert health.status_code == 200 and health.text == "ok"
