"""Per-call cost of rlrm's synchronous HTTP calls: aiohttp on a loop thread (rlrm/launch/common/http.py) vs httpx.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/http_client_sync.py [--calls 200] [--pairs 9] [--model tiny:policy]

Starts one embedded server (its own process) and times `--calls` sequential `GET /health` calls per block, in
three ways: (A) `rlrm.launch.common.http.get`, what rlrm's synchronous callers use now; (B) `httpx.get`, what
they used before (a new client, so a new connection, each call); (C) one `httpx.Client` kept open (httpx with
keep-alive, for reference). Blocks alternate A B C, `--pairs` times after a warm-up; it prints each block's
mean per call and the medians of the per-round ratios B/A and C/A (above 1: A is faster). httpx is a dev
dependency only; rlrm itself no longer imports it.
"""

from __future__ import annotations

import argparse
import statistics
import time


def _block(call, url: str, calls: int) -> float:
    """Mean seconds per call over `calls` sequential calls, each checked to answer 200."""
    t0 = time.perf_counter()
    for _ in range(calls):
        assert call(url) == 200
    return (time.perf_counter() - t0) / calls


def main() -> None:
    import httpx

    from rlrm.engine.models.tiny import resolve_model_path
    from rlrm.launch.common import http
    from rlrm.launch.common.ports import free_port
    from rlrm.launch.fleet.process import ServerProcess, embedded_server_argv

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("--model", default="tiny:policy")
    args = parser.parse_args()

    model = resolve_model_path(args.model)  # tiny models are built on first use ($RLRM_MODELS_DIR)
    argv = embedded_server_argv(str(model), "policy", free_port(), extra=["--threads", "1"])
    with ServerProcess(argv) as server, httpx.Client() as pooled:
        url = server.url + "/health"
        ways = {
            "A aiohttp loop thread": lambda u: http.get(u, timeout_s=10).status,
            "B httpx.get": lambda u: httpx.get(u, timeout=10).status_code,
            "C httpx.Client": lambda u: pooled.get(u, timeout=10).status_code,
        }
        for call in ways.values():  # warm-up: imports, the loop thread, the first connections
            _block(call, url, 20)
        rounds = [{name: _block(call, url, args.calls) for name, call in ways.items()} for _ in range(args.pairs)]
    for i, r in enumerate(rounds):
        print(f"round {i}: " + "  ".join(f"{name} {s * 1e6:7.0f} us/call" for name, s in r.items()))
    a, b, c = ways
    for name in (b, c):
        ratios = [r[name] / r[a] for r in rounds]
        print(
            f"median {name} / {a}: {statistics.median(ratios):.2f} "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f}; {args.pairs} rounds of {args.calls} calls)"
        )
    print("median per call: " + ", ".join(f"{n} {statistics.median(r[n] for r in rounds) * 1e6:.0f} us" for n in ways))


if __name__ == "__main__":
    main()
