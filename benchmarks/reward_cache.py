"""How often a GenRM or rubric run asks its judge the same question, and what the reward cache saves.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/reward_cache.py --steps 10
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/reward_cache.py --steps 10 --compare --pairs 2
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/reward_cache.py --steps 40 --compare --pairs 2 --hosted-rpm 3000
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/reward_cache.py --profile tiny-rubric --steps 40 --compare --pairs 2

Runs `rlrm train --profile PROFILE` (tiny-genrm unless --profile says otherwise; subprocesses; samples.jsonl on,
no validation or checkpoints) with the reward cache on (the profiles' default: reward.cache.enabled=auto) and
prints, per step, from samples.jsonl and metrics.jsonl:
- samples, distinct (prompt, response) pairs among them, and pairs already judged at an earlier step;
- reward/cache_hits and misses (hit rate), the judge calls really made (reward/model_calls) and the calls
  saved (reward/cache_saved_model_calls): a repeat inside a step waits for the first of its kind;
and the run's totals. Hits and misses count samples; judge calls count requests. A GenRM judge gets one request
per judged sample, a rubric one per criterion: K per judged sample (K read from the run's config.yaml), so a
rubric's hit saves K calls. With --compare, runs with the cache on and off alternated (on, off, on, off ...;
same seed) and, per side, the mean and median step time and the mean reward phase (timing_s/reward; steps 2
on), the judge calls, the hit rate (the run's, and the lowest and highest of a step), and the median of the pair
ratios (on / off step time); and whether the two sides gave the same score (and the same reward components,
for a rubric) to the same (prompt, response).

With --hosted-rpm RPM the judge is the test suite's stand-in for a hosted, rate-limited OpenAI-compatible API
(tests/fixtures/standin_openai_api.py, a real HTTP server on loopback, not a provider; 429 + Retry-After over
RPM), one fresh per run, reached as users reach a hosted judge: its base URL in reward.server.addresses, its
key in an environment variable named by reward.server.api_key_env, and reward.limits.rpm=RPM. Each run then
also reports the requests the stand-in let in (its readiness probe and the guard's canaries included) and the
429s it answered.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
STANDIN_KEY = "standin-key-for-the-benchmark"  # the stand-in's own key: given through the environment only


def train(
    run_dir: Path, profile: str, steps: int, seed: int, cache: bool, overrides: list[str], env: dict | None = None
) -> None:
    cmd = [sys.executable, "-m", "rlrm.cli", "train", "--profile", profile, "--steps", str(steps)]
    cmd += ["--out", str(run_dir), "--console", "none", "--seed", str(seed)]
    sets = ["trainer.save_every=0", "trainer.val_every=0", "trainer.val_before_train=false"]
    sets += ["logging.save_samples=true", f"reward.cache.enabled={'auto' if cache else 'false'}", *overrides]
    for item in sets:
        cmd += ["--set", item]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)


def hosted_sets(api, rpm: float) -> list[str]:
    """The profile keys that point the profile's judge at the stand-in API, as a user points it at a provider."""
    return [
        f"reward.server.addresses=[{api.base_url}]",
        f"reward.server.model={api.model}",
        "reward.server.api_key_env=STANDIN_KEY",
        f"reward.limits.rpm={rpm:g}",
    ]


def timed_run(run_dir: Path, args, cache: bool) -> dict:
    """One run; with --hosted-rpm against a fresh stand-in, whose accepted and throttled requests are counted."""
    if args.hosted_rpm is None:
        train(run_dir, args.profile, args.steps, args.seed, cache, args.overrides)
        return {"accepted": None, "throttled": None}
    sys.path.insert(0, str(REPO / "tests" / "fixtures"))
    from standin_openai_api import StandinOpenAIAPI

    env = {**os.environ, "STANDIN_KEY": STANDIN_KEY, "PYTHONPATH": str(REPO)}
    with StandinOpenAIAPI(STANDIN_KEY, rpm=args.hosted_rpm) as api:
        sets = [*hosted_sets(api, args.hosted_rpm), *args.overrides]
        train(run_dir, args.profile, args.steps, args.seed, cache, sets, env)
        return {"accepted": len(api.accepted), "throttled": len(api.throttled)}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def calls_per_judgement(run_dir: Path) -> int:
    """K: the judge requests one judged sample costs (a rubric's criteria; 1 for any other reward)."""
    reward = yaml.safe_load((run_dir / "config.yaml").read_text())["reward"]
    return len(reward["rubric"]["criteria"]) if reward["kind"] == "rubric" else 1


def per_step(run_dir: Path) -> list[dict]:
    rows = {r["step"]: r for r in read_jsonl(run_dir / "metrics.jsonl") if r.get("step", 0) > 0}
    by_step = defaultdict(list)
    for s in read_jsonl(run_dir / "samples.jsonl"):
        by_step[s["step"]].append((json.dumps(s["prompt"], sort_keys=True), s["response"], s["ground_truth"]))
    seen: set = set()
    out = []
    for step in sorted(rows):
        pairs = by_step[step]
        distinct = set(pairs)
        r = rows[step]
        out.append(
            {
                "step": step,
                "samples": len(pairs),
                "distinct": len(distinct),
                "seen_before": len(distinct & seen),
                "hits": r.get("reward/cache_hits", 0),
                "misses": r.get("reward/cache_misses", 0),
                "judge_calls": r.get("reward/model_calls", 0),
                "saved_calls": r.get("reward/cache_saved_model_calls", 0),
                "rate_limited": r.get("reward/rate_limited", 0),
                "failures": r.get("reward/failures", 0),
                "step_s": r["timing_s/step"],
                "reward_s": r.get("timing_s/reward", 0.0),
            }
        )
        seen |= distinct
    return out


def scored(run_dir: Path) -> dict[tuple, tuple]:
    """(step, uid, index) -> (prompt, response, reference, (score, components)) of every sample the run trained on."""
    return {
        (s["step"], s["uid"], s["index"]): (
            json.dumps(s["prompt"], sort_keys=True),
            s["response"],
            s["ground_truth"],
            (s["score"], json.dumps(s["reward_extra_info"].get("reward_components"), sort_keys=True)),
        )
        for s in read_jsonl(run_dir / "samples.jsonl")
    }


def hit_rate(row: dict) -> float:
    return row["hits"] / max(1, row["hits"] + row["misses"])


def print_table(rows: list[dict], k: int) -> None:
    print(
        f"hits, misses: samples (a miss is judged); judge-calls, saved: requests to the judge, {k} per judged sample"
        + (" (one per rubric criterion)" if k > 1 else "")
    )
    print("step  samples  distinct  seen-before  hits  misses  hit-rate  judge-calls  saved  failures")
    for r in rows:
        print(
            f"{r['step']:>4}  {r['samples']:>7}  {r['distinct']:>8}  {r['seen_before']:>11}  {r['hits']:>4}  "
            f"{r['misses']:>6}  {hit_rate(r):>8.3f}  {r['judge_calls']:>11}  {r['saved_calls']:>5}  {r['failures']:>8}"
        )
    samples, hits = sum(r["samples"] for r in rows), sum(r["hits"] for r in rows)
    calls, saved = sum(r["judge_calls"] for r in rows), sum(r["saved_calls"] for r in rows)
    print(
        f"run: {samples} samples, {hits} from the cache (hit rate {hits / max(1, samples):.3f}); "
        f"{calls} judge calls made, {saved} saved ({saved / max(1, calls + saved):.3f} of {calls + saved}); "
        f"per-step hit rate {min(map(hit_rate, rows)):.3f}-{max(map(hit_rate, rows)):.3f}"
    )


def summarise(run_dir: Path, counted: dict) -> dict:
    steps = per_step(run_dir)
    times = [r["step_s"] for r in steps[1:]]
    samples = sum(r["samples"] for r in steps)
    return {
        **counted,
        "mean_s": statistics.mean(times),
        "median_s": statistics.median(times),
        "reward_mean_s": statistics.mean(r["reward_s"] for r in steps[1:]),
        "judge_calls": sum(r["judge_calls"] for r in steps),
        "saved_calls": sum(r["saved_calls"] for r in steps),
        "rate_limited": sum(r["rate_limited"] for r in steps),
        "failures": sum(r["failures"] for r in steps),
        "hit_rate": sum(r["hits"] for r in steps) / max(1, samples),
        "step_hit_rate_min": min(map(hit_rate, steps)),
        "step_hit_rate_max": max(map(hit_rate, steps)),
    }


def consistency(runs: list[Path]) -> str:
    """Whether the runs trained on the same samples and scored each (prompt, response, reference) alike."""
    sides = [scored(run) for run in runs]
    first = sides[0]
    same = sum(1 for side in sides[1:] for key, value in side.items() if first.get(key, (None,))[:3] == value[:3])
    verdicts: dict[tuple, set] = defaultdict(set)
    for side in sides:
        for value in side.values():
            verdicts[value[:3]].add(value[3])
    split = sum(1 for scores in verdicts.values() if len(scores) > 1)
    total = sum(len(side) for side in sides[1:])
    return (
        f"{same} of {total} samples in runs 2-{len(runs)} identical to run 1's at the same (step, uid, index); "
        f"{len(verdicts)} distinct (prompt, response, reference) over all runs, {split} given a different score or reward components by two runs"
    )


def compare(args, tmp: Path) -> None:
    results: dict[str, list[dict]] = {"on": [], "off": []}
    runs = []
    for i in range(2 * args.pairs):
        which = "on" if i % 2 == 0 else "off"
        out = tmp / f"{which}-{i // 2}"
        counted = timed_run(out, args, which == "on")
        results[which].append(summarise(out, counted))
        runs.append(out)
        if i == 0:
            print_table(per_step(out), calls_per_judgement(out))
        print(f"run {i + 1} (cache {which}): {json.dumps(results[which][-1])}", flush=True)
    print(
        "| cache | mean step s | median step s | judge calls (reward/model_calls) | saved | stand-in accepted "
        "| 429s (stand-in / rlrm) | hit rate (steps min-max) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for which in ("on", "off"):
        rows = results[which]

        def each(key: str, fmt: str) -> str:
            return ", ".join("-" if r[key] is None else format(r[key], fmt) for r in rows)

        print(
            f"| {which} | {statistics.mean(r['mean_s'] for r in rows):.3f} ({each('mean_s', '.3f')}) | "
            f"{statistics.median(r['median_s'] for r in rows):.3f} ({each('median_s', '.3f')}) | "
            f"{each('judge_calls', 'd')} | {each('saved_calls', 'd')} | {each('accepted', 'd')} | "
            f"{each('throttled', 'd')} / {each('rate_limited', 'd')} | {each('hit_rate', '.3f')} "
            f"({each('step_hit_rate_min', '.3f')} - {each('step_hit_rate_max', '.3f')}) |"
        )
    ratios = [on["mean_s"] / off["mean_s"] for on, off in zip(results["on"], results["off"])]
    medians = [on["median_s"] / off["median_s"] for on, off in zip(results["on"], results["off"])]
    print(
        f"on/off mean step time per pair: {', '.join(f'{r:.3f}' for r in ratios)}; median {statistics.median(ratios):.3f}"
        f" (steps 2-{args.steps}); on/off median step time per pair: {', '.join(f'{r:.3f}' for r in medians)}; "
        f"median {statistics.median(medians):.3f}"
    )
    print(consistency(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="tiny-genrm", help="a profile whose reward calls a judge (genrm, rubric)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compare", action="store_true", help="time alternated runs with the cache on and off")
    parser.add_argument("--pairs", type=int, default=1, help="with --compare: on/off pairs, run on, off, on, off ...")
    parser.add_argument(
        "--hosted-rpm", type=float, help="judge: the stand-in hosted API limited to this many requests a minute"
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.compare:
            compare(args, Path(tmp))
            return
        run = Path(tmp) / "cached"
        counted = timed_run(run, args, True)
        print_table(per_step(run), calls_per_judgement(run))
        if args.hosted_rpm is not None:
            print(f"stand-in: {counted['accepted']} requests accepted, {counted['throttled']} answered 429")


if __name__ == "__main__":
    main()
