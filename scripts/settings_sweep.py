"""Run `rlrm train` for 2 small steps over the tiny profiles crossed with the settings that change a run's path,
and list each run that did not exit 0 (its last error line), on the CPU or on the stand-in GPU.

    .venv/bin/python scripts/settings_sweep.py [--stand-in] [--only SUBSTRING] [--out DIR]

The default test tier runs each path on its own; a setting's path crossed with another profile's is where a run
still breaks unseen (`reward.placement=colocated` behind the SGLang router stopped every colocated judge run at its
first /sleep until 2026-11-28). 73 runs, about 12 minutes on 2 cores, one at a time. With --stand-in every Python
process of a run that loads a model runs on the stand-in GPU (tests/fixtures/stand_in_site/sitecustomize.py) with
`trainer.device=cuda`, and a run whose servers each ran fewer than 100 ops on it is listed too (their models stayed
on the CPU; one of two replicas alone may: in one tiny-fapo run one replica got next to no requests, 27 ops). Refusals are expected where a setting needs another (gdpo without component weights, a boxed verdict
from the score-trained judge): read the lines. The actor's FSDP2 ranks run on the CPU under --stand-in (their
collectives take CPU or CUDA tensors), and fail at their save there (DCP asks the stand-in for streams).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fixtures"))
from small_run import SMALL_RUN  # noqa: E402  (the integration tests' small run)

SMALL = (*SMALL_RUN, "trainer.total_steps=2")
MODES = ("sync", "stream", "pipeline", "one-step-off", "fully-async")
MODEL_REWARDS = ("tiny-genrm", "tiny-disrm", "tiny-rubric", "tiny-fapo")


def cases() -> list[tuple[str, list[str]]]:
    """(profile, settings) of each run."""
    runs = [
        (profile, [f"trainer.mode={mode}"])
        for profile in ("tiny-rule", *MODEL_REWARDS, "tiny-tools", "tiny-rule-served")
        for mode in MODES
    ]
    for profile in MODEL_REWARDS:
        runs += [
            (profile, ["trainer.mode=sync", "reward.placement=colocated"]),
            (profile, ["reward.server.router=client"]),
            (profile, ["rollout.backend=server"]),
            (profile, ["reward.server.replicas=2"]),
            (profile, ["reward.cache.enabled=false"]),
        ]
    for mode in MODES:
        runs += [
            ("tiny-disrm", [f"trainer.mode={mode}", "reward.disrm.scorer=legacy"]),
            ("tiny-rule", [f"trainer.mode={mode}", "actor.world_size=2"]),
        ]
    return runs + [
        ("tiny-tools", ["rollout.backend=server"]),
        ("tiny-genrm", ["trainer.val_every=1", "trainer.save_every=1"]),
        ("tiny-rule-served", ["trainer.val_every=1", "trainer.save_every=1", "trainer.mode=fully-async"]),
        ("tiny-genrm", ["reward.genrm.verdict=boxed"]),
        ("tiny-rule", ["model.dtype=bfloat16"]),
        ("tiny-rule", ["model.dtype=bfloat16", "model.precision=pure"]),
        ("tiny-rule", ["actor.use_kl_loss=true", "trainer.mode=fully-async"]),
        ("tiny-rule", ["algorithm.component_norm=gdpo"]),
    ]


def run(profile: str, settings: list[str], folder: Path, stand_in: bool) -> tuple[str, list[dict]]:
    """One run; its outcome ("ok" or its last error line) and, on the stand-in, each process's record."""
    records = folder.with_name(folder.name + "-processes")
    records.mkdir(parents=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env.setdefault("RLRM_MODELS_DIR", str(REPO / ".cache" / "models"))
    if stand_in:
        fixtures = REPO / "tests" / "fixtures"
        env.update(RLRM_STAND_IN_GPU=str(records), PYTHONPATH=f"{fixtures / 'stand_in_site'}{os.pathsep}{fixtures}")
        settings = [*settings, "trainer.device=cuda"]
    argv = [sys.executable, "-m", "rlrm", "train", "--profile", profile, "--out", str(folder)]
    argv += [arg for setting in (*SMALL, *settings) for arg in ("--set", setting)]
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=400, cwd=REPO)
    except subprocess.TimeoutExpired:
        return "timed out after 400 s", []
    lines = [line for line in done.stderr.splitlines() if line.strip() and "registered at" not in line]
    outcome = "ok" if done.returncode == 0 else (lines[-1] if lines else f"exit code {done.returncode}")
    return outcome, [json.loads(path.read_text()) for path in sorted(records.glob("*.json"))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stand-in", action="store_true", help="every process on the stand-in GPU")
    parser.add_argument("--only", default="", help="runs whose profile and settings contain this")
    parser.add_argument("--out", type=Path, default=None, help="where the run folders go (default: a temp folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="rlrm-sweep-"))
    failed = 0
    for i, (profile, settings) in enumerate(cases()):
        label = " ".join([profile, *settings])
        if args.only not in label:
            continue
        start = time.monotonic()
        outcome, processes = run(profile, settings, out / f"run{i}", args.stand_in)
        servers = [p["ops"] for p in processes if "launch/server" in p["argv"][0]]
        if outcome == "ok" and servers and max(servers) < 100:  # one of 2 replicas may get next to no requests
            outcome = f"its servers ran {servers} ops on the stand-in: their models stayed on the CPU"
        failed += outcome != "ok"
        print(f"{i:3d} {time.monotonic() - start:6.1f} s  {label}: {outcome}", flush=True)
    print(f"{failed} run(s) did not pass; run folders in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
