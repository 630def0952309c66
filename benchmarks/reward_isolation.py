"""What running a sync custom reward in worker processes costs per sample, against the in-thread call.

    python benchmarks/reward_isolation.py [--pairs 5] [--samples 512] [--concurrency 32] [--processes 2]

The function is the GSM8K rule's shape of work (a regex over a ~60-token response, microseconds), so what is
timed is the path around it: `reward.custom.isolation=process` (rlrm/engine/rewards/worker_pool.py: arguments and
result through a pipe to a warm worker) against `thread` (rlrm/engine/rewards/threads.py: a new daemon thread per
call). Each side scores `--samples` samples with `--concurrency` in flight; the two alternate (A B A B ...) for
`--pairs` pairs, each pair's ratio is taken inside the pair, and the median ratio is printed with each side's median
microseconds per sample. The workers are started (and warm) before the first pair: their start-up is printed apart.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FUNCTION = """
import re

def compute_score(data_source, solution_str, ground_truth, extra_info):
    found = re.findall(r"#### (\\-?[0-9\\.\\,]+)", solution_str)
    return float(bool(found) and found[-1].replace(",", "") == ground_truth)
"""
RESPONSE = "Tom has 12 apples and buys 30 more, so he has 12 + 30 = 42 apples in all.\n#### 42"


async def _score_all(call, samples: int, concurrency: int) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> float:
        async with gate:
            return await call(("gsm8k", RESPONSE, "42", {"index": i}))

    start = time.perf_counter()
    scores = await asyncio.gather(*(one(i) for i in range(samples)))
    assert all(s == 1.0 for s in scores)
    return (time.perf_counter() - start) / samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()

    from rlrm.engine.rewards.threads import run_abandonable
    from rlrm.engine.rewards.worker_pool import FunctionPool
    from rlrm.user_code import import_file

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rule.py"
        path.write_text(FUNCTION)
        fn = import_file(path, "bench_rule", "benchmark").compute_score
        pool = FunctionPool(str(path), "compute_score", processes=args.processes)

        async def warm() -> float:
            start = time.perf_counter()
            await asyncio.gather(*(pool.call(("gsm8k", RESPONSE, "42", {}), {}) for _ in range(args.processes)))
            return time.perf_counter() - start

        print(f"{args.processes} workers started and warm in {asyncio.run(warm()):.2f} s")
        sides = {
            "thread": lambda a: run_abandonable(fn, *a),
            "process": lambda a: pool.call(a, {}),
        }
        per_sample: dict[str, list[float]] = {"thread": [], "process": []}
        ratios = []
        for k in range(args.pairs):
            for name in ("thread", "process"):
                per_sample[name].append(asyncio.run(_score_all(sides[name], args.samples, args.concurrency)))
            ratios.append(per_sample["process"][-1] / per_sample["thread"][-1])
            print(
                f"pair {k + 1}: thread {per_sample['thread'][-1] * 1e6:.0f} us/sample, "
                f"process {per_sample['process'][-1] * 1e6:.0f} us/sample, ratio {ratios[-1]:.2f}",
                flush=True,
            )
        pool.close()
    t, p = statistics.median(per_sample["thread"]), statistics.median(per_sample["process"])
    print(
        f"\n{args.samples} samples x {args.pairs} alternated pairs, {args.concurrency} in flight, "
        f"{args.processes} workers: thread {t * 1e6:.0f} us/sample, process {p * 1e6:.0f} us/sample (medians); "
        f"process/thread median pair ratio {statistics.median(ratios):.2f}, overhead {(p - t) * 1e6:+.0f} us/sample"
    )


if __name__ == "__main__":
    main()
