"""rlrm's GRPO step vs TRL's `GRPOTrainer` step on the identical tiny config, alternated in separate processes.

    RLRM_TRL_PYTHON=/work/venvs/trl/bin/python python benchmarks/step_vs_trl.py [--pairs 3] [--steps 8] [--warmup 2]
    python benchmarks/step_vs_trl.py --trl-python python3 --device cuda --shape qwen2.5-0.5b --dtype bfloat16 \
        --set rollout.max_new_tokens=128
    python benchmarks/step_vs_trl.py --trl-python /work/venvs/trl/bin/python --passive --set actor.recompute_old_log_prob=always

TRL runs from its own interpreter (`--trl-python`, else $RLRM_TRL_PYTHON): a venv made with
`pip install torch==2.13.0`, then `pip install -c <file holding torch==2.13.0> trl datasets`. Without one the
script prints one line and exits 0.

The config is tiny-rule's: 32 prompts x 8 samples, 20 new tokens at temperature 1, lr 1e-4, no KL
(TRL: beta=0, so no reference model), one mini-batch of all 256 samples and one micro-batch, one
epoch, `--threads` torch threads, sync mode, on `--device` (cpu or cuda). `--shape qwen2.5-0.5b` replaces the
tiny policy with a random-weight model of that shape and the tiny tokenizer (358 M parameters; nothing is
downloaded). `--dtype bfloat16` trains in mixed precision on both sides: rlrm's model.precision=mixed (float32
master weights, autocast to bf16), TRL's bf16=True (accelerate's autocast over float32 weights). `--tf32` runs
CUDA's float32 products in TF32 on both sides (rlrm's model.tf32, TRL's tf32). Both sides load the same policy folder, train on
the same prompts in the same order (rlrm's shuffled synthetic train split; TRL with
shuffle_dataset=False) and score with the same function (rlrm's GSM8K strict rule).

A pair is one `rlrm train` process, then one TRL process, each running `--warmup` + `--steps` steps;
the pairs repeat `--pairs` times (A B A B ...), so load from other processes hits both alike. A step
time is the interval between the ends of two consecutive steps (everything a user waits for: data,
generation, rewards, update, logging); the first `--warmup` steps are left out. Printed: each side's
median, min and max over all pairs, its median CPU seconds per step (all threads of the process),
each pair's ratio of medians (rlrm / TRL), for step time and CPU time, and their medians.

How OpenMP threads wait decides much of the step time on a small, shared VM. libgomp lets a
worker spin for a while after each parallel region (~300k pause loops) unless the process runs
more OpenMP threads than there are CPUs, when it spins only 100 loops and then sleeps. TRL runs all
its ops on one thread: one team, spinning; rlrm decodes in its engine thread and trains on
another: two teams, near-passive waits. When the host is busy the spinning costs TRL many times
its CPU work; `--passive` sets OMP_WAIT_POLICY=PASSIVE on both sides, so that both wait alike and
the step times compare the work done.

What one side does that the other does not (same samples, same max tokens, same loss otherwise):
  rlrm  returns per-token log-probs from its rollout engine (one log_softmax per decode step); keeps
        a separate copy of the policy for generation and loads the new weights into it after each
        update; runs each distinct prompt once in the prefill and in the actor's passes (its 8
        samples get copies of its KV cache); drops finished rows from the decode batch; recomputes
        old log-probs only when `actor.recompute_old_log_prob` says so (auto: not in this
        on-policy single-epoch config); keeps freed heap memory between steps (rlrm/allocator.py);
        writes metrics.jsonl, trace spans and idle ratios.
  TRL   generates with `model.generate` on the trained model (no log-probs, rows stay until all
        finish); scores log-probs through its fused, tiled LM head; fused AdamW, linear lr decay;
        gradient checkpointing is off here (TRL's default is on: `--trl-gradient-checkpointing`,
        which recomputes every activation in the backward pass).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROFILE = "tiny-rule"
# `rlrm train` with the process's CPU time (all threads) stamped on each metrics row, for CPU seconds per step.
_RLRM = (
    "import sys, time\n"
    "from rlrm.engine.metrics import metrics_file as tracker\n"
    "log = tracker.MetricsWriter.log\n"
    "tracker.MetricsWriter.log = lambda self, row: log(self, {**row, 'bench/cpu_s': time.process_time()})\n"
    "from rlrm.cli.main import main\n"
    "sys.argv = ['rlrm', *sys.argv[1:]]\n"
    "main()\n"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--trl-python", default=os.environ.get("RLRM_TRL_PYTHON"), help="interpreter with trl installed"
    )
    parser.add_argument("--pairs", type=int, default=3, help="alternated (rlrm, TRL) process pairs")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per process")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps at the start of each process")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads on both sides")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="extra rlrm override (repeatable)")
    parser.add_argument("--trl-gradient-checkpointing", action="store_true", help="TRL's default; extra work")
    parser.add_argument("--passive", action="store_true", help="OMP_WAIT_POLICY=PASSIVE on both sides (see above)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where both sides train")
    parser.add_argument("--shape", help="a random-weight policy of this shape (e.g. qwen2.5-0.5b) instead of tiny")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="compute dtype")
    parser.add_argument(
        "--tf32",
        action="store_true",
        help="CUDA's float32 products in TF32 on both sides (rlrm model.tf32=true; TRL: the same torch flag)",
    )
    parser.add_argument(
        "--micro-batch",
        type=int,
        help="samples per forward and backward on both sides (rlrm actor.micro_batch_size, TRL "
        "per_device_train_batch_size with the rest as gradient accumulation); default: all samples at once, "
        "32 with --shape (the 0.5B shape's 256 x 173-token activations do not fit 80 GB at once)",
    )
    parser.add_argument("--worker", choices=["trl"], help=argparse.SUPPRESS)
    parser.add_argument("--job", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "trl":
        return trl_worker(json.loads(args.job.read_text()))
    reason = _trl_missing(args.trl_python)
    if reason:
        print(f"step_vs_trl: skipped: {reason}")
        return
    total = args.warmup + args.steps
    if args.micro_batch is None and args.shape:
        args.micro_batch = 32
    if args.micro_batch:
        args.overrides = [f"actor.micro_batch_size={args.micro_batch}", *args.overrides]
    if args.tf32:
        args.overrides = ["model.tf32=true", *args.overrides]
    with tempfile.TemporaryDirectory(prefix="step_vs_trl-") as tmp:
        tmp = Path(tmp)
        model = _shaped(args.shape, tmp / "policy") if args.shape else None
        overrides = _rlrm_overrides(args.threads, args.device, args.dtype, model, args.overrides)
        job = _trl_job(tmp, overrides, total, args)
        env = {**os.environ, **({"OMP_WAIT_POLICY": "PASSIVE"} if args.passive else {})}
        pairs = []
        for k in range(args.pairs):
            rlrm = run_rlrm(tmp / f"rlrm-{k}", overrides, total, env)
            trl = run_trl(args.trl_python, job, tmp / f"trl-{k}.json", env)
            pairs.append((rlrm, trl))
            print(
                f"pair {k + 1}: rlrm median {_median(rlrm['step_s'], args.warmup):.3f} s "
                f"({_median(rlrm['cpu_s'], args.warmup):.3f} CPU s), TRL median "
                f"{_median(trl['step_s'], args.warmup):.3f} s ({_median(trl['cpu_s'], args.warmup):.3f} CPU s)",
                flush=True,
            )
    report(pairs, args)


def _rlrm_overrides(threads: int, device: str, dtype: str, model: str | None, extra: list[str]) -> list[str]:
    fixed = [
        "trainer.save_every=0",
        "trainer.val_every=0",
        "trainer.val_before_train=false",
        f"trainer.device={device}",
        "trainer.mode=sync",
        f"trainer.num_threads={threads}",
        f"model.dtype={dtype}",
        "model.precision=mixed",
        *([f"model.path={model}"] if model else []),
    ]
    return fixed + list(extra)


def _shaped(shape: str, folder: Path) -> str:
    """A random-weight policy of `shape` with the tiny policy's tokenizer (benchmarks/_common.py)."""
    from _common import shaped_policy

    from rlrm.engine.models.tiny import resolve_model_path

    return shaped_policy(shape, Path(resolve_model_path("tiny:policy")), folder)


def _trl_missing(python: str | None) -> str | None:
    if not python:
        return "no TRL interpreter (pass --trl-python or set RLRM_TRL_PYTHON)"
    if not Path(python).exists():
        return f"{python} does not exist"
    probe = subprocess.run([python, "-c", "import trl"], capture_output=True, text=True)
    if probe.returncode:
        return f"{python} cannot import trl ({(probe.stderr.strip().splitlines() or ['?'])[-1]})"
    return None


def _trl_job(tmp: Path, overrides: list[str], total: int, args) -> Path:
    """The TRL worker's inputs: rlrm's prompts in the order rlrm trains on them, and the same settings."""
    from rlrm.config.loader import load_profile
    from rlrm.engine.data.dataset import load_splits
    from rlrm.engine.data.loader import PromptLoader
    from rlrm.engine.models.tiny import resolve_model_path

    p = load_profile(PROFILE, overrides)
    train, _, _ = load_splits(p.data)
    loader = PromptLoader(train, p.data.train_batch_size, p.data.shuffle, p.trainer.seed)
    prompts = [ex for _ in range(total) for ex in loader.next_batch()]
    job = {
        "model": str(resolve_model_path(p.model.path)),
        "prompts": [{"prompt": ex.prompt, "ground_truth": ex.ground_truth} for ex in prompts],
        "steps": total,
        "threads": args.threads,
        "n": p.rollout.n,
        "batch": p.data.train_batch_size * p.rollout.n,
        "micro_batch": min(p.actor.micro_batch_size, p.data.train_batch_size * p.rollout.n),
        "max_new_tokens": p.rollout.max_new_tokens,
        "temperature": p.rollout.temperature,
        "lr": p.actor.lr,
        "clip": p.actor.clip_ratio_low,
        "grad_clip": p.actor.grad_clip,
        "method": p.reward.method,
        "gradient_checkpointing": args.trl_gradient_checkpointing,
        "repo": str(REPO),
        "device": args.device,
        "bf16": args.dtype == "bfloat16",
        "tf32": args.tf32,
        "out_dir": str(tmp / "trl-out"),
    }
    path = tmp / "trl-job.json"
    path.write_text(json.dumps(job))
    return path


def run_rlrm(run_dir: Path, overrides: list[str], total: int, env: dict) -> dict:
    """`rlrm train` in a subprocess; step times from the end-of-step wall clock in metrics.jsonl."""
    cmd = [
        sys.executable,
        "-c",
        _RLRM,
        "train",
        "--profile",
        PROFILE,
        "--steps",
        str(total),
        "--out",
        str(run_dir),
        "--console",
        "none",
    ]
    for item in overrides:
        cmd += ["--set", item]
    _run_side("rlrm train", cmd, cwd=REPO, stdout=subprocess.DEVNULL, env=env)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("step", 0) >= 1]
    ends = [r["perf/wall_s"] for r in rows]
    cpu = [r["bench/cpu_s"] for r in rows]
    return {
        "step_s": [ends[0]] + [b - a for a, b in zip(ends, ends[1:])],
        "cpu_s": [cpu[0]] + [b - a for a, b in zip(cpu, cpu[1:])],
        "length": [r["response_length/mean"] for r in rows],
        "memory_gb": max(r["perf/max_memory_gb"] for r in rows),
        "gen_tok_s": [r["perf/response_tokens"] / r["timing_s/gen"] for r in rows if r.get("timing_s/gen")],
        "score": [r["critic/score/mean"] for r in rows],
        "phases": [{k[len("timing_s/") :]: v for k, v in r.items() if k.startswith("timing_s/")} for r in rows],
    }


def run_trl(python: str, job: Path, out: Path, env: dict) -> dict:
    with out.open("w") as stdout:
        _run_side(
            "the TRL worker",
            [python, str(Path(__file__).resolve()), "--worker", "trl", "--job", str(job)],
            stdout=stdout,
            env=env,
        )
    return json.loads(out.read_text().splitlines()[-1])


def _run_side(side: str, cmd: list[str], **popen) -> None:
    """`cmd` with its stderr passed on as it comes (compile warnings that scripts/gpu_check.py reads); a failure
    exits naming the side and its stderr's last line (its one-line error), which the device check's row shows,
    where a traceback of subprocess.CalledProcessError would show the start of the `-c` program."""
    tail = b""
    with subprocess.Popen(cmd, stderr=subprocess.PIPE, **popen) as proc:
        for chunk in iter(lambda: proc.stderr.read1(1 << 16), b""):
            sys.stderr.buffer.write(chunk)
            sys.stderr.flush()
            tail = (tail + chunk)[-4096:]
    if proc.returncode:
        lines = [line.strip() for line in tail.decode(errors="replace").replace("\r", "\n").splitlines()]
        last = next((line for line in reversed(lines) if line), "")
        sys.exit(f"step_vs_trl: {side} failed (exit {proc.returncode}): {last}")


def trl_worker(job: dict) -> None:
    """Runs under the TRL interpreter: GRPOTrainer for `steps` steps; prints one JSON line of timings."""
    sys.path.insert(0, job["repo"])  # rlrm's reward rule (pure Python, no rlrm dependencies)
    import logging
    import warnings

    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer

    from rlrm.engine.rewards.gsm8k import compute_score
    from rlrm.inference.tf32 import cuda_tf32_on

    torch.set_num_threads(job["threads"])
    if job.get("tf32"):  # the setting TrainingArguments(tf32=True) makes, made as rlrm makes it
        cuda_tf32_on()
    hf_logging.set_verbosity_error()
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")

    def gsm8k_rule(completions, ground_truth, **_):
        return [compute_score(c[0]["content"], gt, method=job["method"]) for c, gt in zip(completions, ground_truth)]

    ends: list[float] = []
    cpu: list[float] = []
    lengths: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            ends.append(time.perf_counter())
            cpu.append(time.process_time())

    config = GRPOConfig(
        output_dir=job["out_dir"],
        use_cpu=job["device"] == "cpu",
        use_vllm=False,
        bf16=job["bf16"],
        beta=0.0,
        num_generations=job["n"],
        per_device_train_batch_size=job["micro_batch"],
        # one optimizer step per generation of `batch` samples, as rlrm's single mini-batch
        gradient_accumulation_steps=job["batch"] // job["micro_batch"],
        steps_per_generation=job["batch"] // job["micro_batch"],
        max_completion_length=job["max_new_tokens"],
        temperature=job["temperature"],
        top_p=1.0,
        top_k=0,
        learning_rate=job["lr"],
        epsilon=job["clip"],
        max_grad_norm=job["grad_clip"],
        num_iterations=1,
        max_steps=job["steps"],
        shuffle_dataset=False,
        gradient_checkpointing=job["gradient_checkpointing"],
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=job["model"], reward_funcs=gsm8k_rule, args=config, train_dataset=Dataset.from_list(job["prompts"])
    )

    class Lengths(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs:
                lengths.append(logs["completions/mean_length"])

    trainer.add_callback(StepClock())
    trainer.add_callback(Lengths())
    start, start_cpu = time.perf_counter(), time.process_time()
    trainer.train()
    step_s = [b - a for a, b in zip([start] + ends, ends)]
    cpu_s = [b - a for a, b in zip([start_cpu] + cpu, cpu)]
    memory = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else float("nan")
    print(json.dumps({"step_s": step_s, "cpu_s": cpu_s, "length": lengths, "memory_gb": memory}))


def _median(values: list[float], skip: int) -> float:
    return statistics.median(values[skip:])


def report(pairs: list[tuple[dict, dict]], args) -> None:
    skip = args.warmup
    ratios = [_median(r["step_s"], skip) / _median(t["step_s"], skip) for r, t in pairs]
    cpu_ratios = [_median(r["cpu_s"], skip) / _median(t["cpu_s"], skip) for r, t in pairs]
    print(
        f"\n{PROFILE}{' at shape ' + args.shape if args.shape else ''}, sync, {args.threads} threads, "
        f"{args.device}, {args.dtype}: {len(pairs)} alternated pairs x {args.steps} timed steps "
        f"(after {args.warmup} warm-up){'; OMP_WAIT_POLICY=PASSIVE' if args.passive else ''}; "
        f"rlrm overrides: {' '.join(args.overrides) or 'none'}"
    )
    print(f"{'':6} {'median s':>9} {'min s':>7} {'max s':>7} {'CPU s/step':>11} {'resp. len':>10} {'peak GiB':>9}")
    for name, side in (("rlrm", 0), ("TRL", 1)):
        times = [x for pair in pairs for x in pair[side]["step_s"][skip:]]
        cpu = [x for pair in pairs for x in pair[side]["cpu_s"][skip:]]
        length = statistics.mean(x for pair in pairs for x in pair[side]["length"][skip:] or [float("nan")])
        memory = max(pair[side].get("memory_gb", float("nan")) for pair in pairs)
        print(
            f"{name:6} {statistics.median(times):9.3f} {min(times):7.3f} {max(times):7.3f} "
            f"{statistics.median(cpu):11.3f} {length:10.2f} {memory:9.2f}"
        )
    print(
        "pair ratios rlrm/TRL, step time: "
        + ", ".join(f"{x:.2f}" for x in ratios)
        + f"   median {statistics.median(ratios):.2f}"
    )
    print(
        "pair ratios rlrm/TRL, CPU time:  "
        + ", ".join(f"{x:.2f}" for x in cpu_ratios)
        + f"   median {statistics.median(cpu_ratios):.2f}"
    )
    tok_s = [x for r, _ in pairs for x in r["gen_tok_s"][skip:]]
    if tok_s:
        print(f"rlrm generation: {statistics.median(tok_s):.0f} response tokens/s (median)")
    phases = [ph for r, _ in pairs for ph in r["phases"][skip:]]
    keys = [k for k in phases[0] if k != "step"]
    print(
        "rlrm phases (median s): "
        + ", ".join(f"{k} {statistics.median(p.get(k, 0.0) for p in phases):.3f}" for k in keys)
    )


if __name__ == "__main__":
    main()
