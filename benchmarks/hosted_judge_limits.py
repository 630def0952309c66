"""How a rate-limited judge API is used, measured against the test suite's local stand-in API (not a provider).

    PYTHONPATH=. python benchmarks/hosted_judge_limits.py [--samples 40] [--rpm 300]

Scores the same samples three ways against a stand-in that enforces `rpm` (token bucket, one second of burst,
429 + Retry-After when over): reward.limits.rpm equal to its limit (local workers), no limits (429s waited out
as told), and reward.limits with three Ray reward workers. Prints, per setup: the 429s the stand-in answered,
the request rate it saw as a share of its limit, the samples defaulted, and the throttle wait counted.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "engine"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--rpm", type=float, default=300.0)
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    from standin_openai_api import StandinOpenAIAPI
    from test_hosted_judge import KEY, config, samples, score

    os.environ["STANDIN_KEY"] = KEY
    setups = [("limits = its limit", {"limits": {"rpm": args.rpm}}), ("no limits", {})]
    if not args.no_ray:
        setups.append(("limits, 3 Ray workers", {"limits": {"rpm": args.rpm}, "executor": "ray", "num_workers": 3}))
    print("| setup | 429s | rate / limit | defaulted | rate_limited | throttle wait s |")
    print("|---|---|---|---|---|---|")
    for name, over in setups:
        with StandinOpenAIAPI(KEY, rpm=args.rpm) as api:
            _, metrics = score(config(api, **over), samples(args.samples))
            times = [t for t, _ in api.accepted][1:]  # the first is the readiness probe
            throttled = len(api.throttled)
        rate = (len(times) - 1) / (times[-1] - times[0]) * 60.0
        print(
            f"| {name} | {throttled} | {rate / args.rpm:.3f} | {metrics['reward/defaulted']} | "
            f"{metrics['reward/rate_limited']} | {metrics['reward/throttle_wait_s']:.1f} |"
        )


if __name__ == "__main__":
    main()
