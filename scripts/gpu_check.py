"""The device check's runs and its summary table (scripts/gpu_check.sh runs this after the gpu test tier).

    python scripts/gpu_check.py --out gpu_check_out [--tier-xml gpu_check_out/tier.xml] [--quick]

Each row is one real command on the GPU, timed, its result read from the files it wrote: the tiny models
(built or loaded), tiny-rule, tiny-genrm and tiny-disrm runs, the DisRM parity check (legacy bf16 against the
served fp32), a 3-step reward-latency benchmark, the rollout engine's decoding at the Qwen2.5-0.5B shape (random
weights, the tiny tokenizer; eager against CUDA graphs, tokens/s against the memory-bandwidth bound, the largest
batch), and rlrm's GRPO step against TRL's at that shape in float32, in bf16, and in float32 with TF32 products
on both sides (model.tf32), each decoding with rollout.compile=cudagraphs (the target, rlrm's step at most 0.5x
TRL's, applies to float32 and bf16; a row whose decoding fell back to the eager step says NOT COMPILED), and one
actor micro-batch at that shape with the real vocabulary, its LM head whole and in chunks (peak memory). A row
that fails says so and the rest still run; the exit code is 1 when any row failed. The table goes to stdout and to OUT/gpu_check.md.

On a lease, --budget-s keeps the whole check within it: a row still running at the budget is stopped, with every
process it started (each row runs in its own session: a benchmark's TRL worker or rlrm's servers must not hold the
GPU through the rows after it), and the rows not started are marked NOT REACHED.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUIET = ["trainer.save_every=0", "logging.console=none"]
ROWS = (
    "models",
    "step-fp32",  # the issue's target (rlrm's step <= 0.5x TRL's) first: a lease that runs out keeps it
    "step-bf16",
    "decode",
    "logits",
    "step-tf32",  # last of the 0.5B-shape rows: a short lease that runs out loses this one
    "tiny-rule",
    "tiny-genrm",
    "tiny-disrm",
    "parity",
    "bench",
)
SHAPED = (
    "decode",
    "step-fp32",
    "step-bf16",
    "step-tf32",
    "logits",
)  # the Qwen2.5-0.5B-shape rows, which --quick leaves out
MIN_ROW_S = 20  # a row that would have less of the budget left than this is not started
_DEADLINE = math.inf  # time.monotonic() at which the check's budget (--budget-s) runs out
NO_VAL = ["trainer.val_every=0", "trainer.val_before_train=false"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs, logs and gpu_check.md")
    parser.add_argument("--tier-xml", type=Path, help="the gpu tier's JUnit XML (a row of the table)")
    parser.add_argument("--tier-seconds", type=float, default=float("nan"), help="how long the tier took")
    parser.add_argument("--tier-rc", type=int, default=0, help="the tier's exit code (124: stopped by the budget)")
    parser.add_argument("--quick", action="store_true", help="leave out the 0.5B-shape rows (decoding, step vs TRL)")
    parser.add_argument(
        "--only",
        default="",
        metavar="ROWS",
        help=f"run only these rows, comma-separated, of: {', '.join(ROWS)} (a short lease: the rows not measured yet)",
    )
    parser.add_argument("--device", default="cuda", help="cpu: try the check's own code on a machine without a GPU")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=math.inf,
        help="seconds the rows may take in all: the row running then is stopped, the rest marked NOT REACHED",
    )
    args = parser.parse_args()
    global _DEADLINE
    _DEADLINE = time.monotonic() + args.budget_s
    # `timeout 540 bash scripts/gpu_check.sh` ends with SIGTERM: exit through `_run`'s clean-up, not at once
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in only if name not in ROWS]
    if unknown:
        parser.error(f"unknown row {unknown[0]!r} in --only: choose from {', '.join(ROWS)}")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str, str, str]] = []  # (check, result, time, detail)
    env_line = environment()
    print(env_line, flush=True)

    device = args.device
    graphs = "cudagraphs" if device.startswith("cuda") else "inductor"  # CUDA graphs need CUDA
    every = {  # in the order they run: the 0.5B-shape rows, never measured on a GPU yet, before the tiny runs
        "models": (check_models, out),
        "step-fp32": (check_step_vs_trl, out, device, "float32", graphs),
        "step-bf16": (check_step_vs_trl, out, device, "bfloat16", graphs),
        "decode": (check_decode, out, device),
        "logits": (check_logits, out, device),
        "step-tf32": (check_step_vs_trl, out, device, "float32", graphs, True),
        "tiny-rule": (check_train, out, device, "tiny-rule", 12, ["trainer.val_every=12", "data.val_size=128"]),
        "tiny-genrm": (check_train, out, device, "tiny-genrm", 4, NO_VAL),
        "tiny-disrm": (check_train, out, device, "tiny-disrm", 4, NO_VAL),
        "parity": (check_parity, out, device),
        "bench": (check_bench, out, device),
    }
    chosen = only or [name for name in ROWS if not (args.quick and name in SHAPED)]
    checks = [(name, every[name]) for name in ROWS if name in chosen]
    if args.tier_xml:
        rows.append(tier_row(args.tier_xml, args.tier_seconds, args.tier_rc))
    stopped = False
    for name, (fn, *fn_args) in checks:
        if stopped:
            rows.append((name, "NOT REACHED", "", "the check was stopped first (SIGTERM or Ctrl-C)"))
            continue
        if _DEADLINE - time.monotonic() < MIN_ROW_S:
            rows.append((name, "NOT REACHED", "", f"the check's budget (--budget-s {args.budget_s:g}) ran out first"))
            print(" | ".join(rows[-1]), flush=True)
            continue
        try:
            rows.append(fn(*fn_args))
        except Exception as exc:  # a bug in reading one check's files must not lose the others' rows
            rows.append((fn.__name__, "FAILED", "", f"{type(exc).__name__}: {exc}"[:150]))
        except (SystemExit, KeyboardInterrupt):  # an outer `timeout` or Ctrl-C: the table still says what ran
            rows.append((name, "STOPPED", "", "the check was stopped (SIGTERM or Ctrl-C) during this row"))
            stopped = True
        print(" | ".join(rows[-1]), flush=True)
        text = _table(env_line, rows)  # written after each row: a lease that ends mid-check keeps what ran
        (out / "gpu_check.md").write_text(text + "\n")
    text = _table(env_line, rows)
    (out / "gpu_check.md").write_text(text + "\n")
    print("\n" + text, flush=True)
    failed = [c for c, r, _, _ in rows if r != "ok"]
    print(
        f"\ngpu_check: {len(rows) - len(failed)} of {len(rows)} checks ok"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


def _table(env_line: str, rows: list[tuple[str, str, str, str]]) -> str:
    table = ["| check | result | wall s | figures |", "|---|---|---|---|"]
    table += [f"| {c} | {r} | {t} | {d} |" for c, r, t, d in rows]
    return "\n".join([env_line, "", *table])


def environment() -> str:
    import torch
    import transformers

    if not torch.cuda.is_available():
        return f"no CUDA device (torch {torch.__version__}): the check needs one"
    props = torch.cuda.get_device_properties(0)
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], timeout=30).stdout.strip()
    return (
        f"{torch.cuda.device_count()} x {props.name} ({props.total_memory / 2**30:.0f} GiB), driver {driver or '?'}, "
        f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, "
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )


def _run(cmd: list[str], timeout: float, log: Path | None = None) -> subprocess.CompletedProcess:
    """`cmd` in a session of its own, stopped with all it started at `timeout` or at the check's budget."""
    timeout = max(1.0, min(timeout, _DEADLINE - time.monotonic()))
    try:
        proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    except FileNotFoundError as exc:
        return subprocess.CompletedProcess(cmd, 127, "", str(exc))
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        done = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    except subprocess.TimeoutExpired:
        _stop_session(proc)
        try:  # a grandchild that made a session of its own may still hold the pipes: do not wait on it for long
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            stdout, stderr = "", ""
        done = subprocess.CompletedProcess(
            cmd, 124, stdout or "", (stderr or "") + f"\ntimed out after {timeout:.0f} s"
        )
    except BaseException:  # Ctrl-C, or a `timeout` around the check: the row's session is not theirs to signal
        _stop_session(proc)
        raise
    if log is not None:
        log.write_text(f"$ {' '.join(cmd)}\n{done.stdout}\n{done.stderr}")
    return done


def _stop_session(proc: subprocess.Popen) -> None:
    """SIGKILL the row's process group (its session's leader is `proc`), then reap `proc`."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _rlrm(*args: str) -> list[str]:
    return [sys.executable, "-m", "rlrm", *args]


def _sets(overrides: list[str]) -> list[str]:
    return [a for s in overrides for a in ("--set", s)]


def _failed(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    return f"exit {done.returncode}: {lines[-1][:150] if lines else ''}".replace("|", "/")


def _fallback(done: subprocess.CompletedProcess) -> list[str]:
    """The compiled decoder's fallback warning, if a run printed one: it decoded, but not as the row names."""
    fallbacks = ("capturing a decode step", "compiling a decode step", "non-static layers")  # not a bucket move
    warned = [
        line
        for line in done.stderr.splitlines()
        if line.startswith("warning: rollout.compile=") and any(f in line for f in fallbacks)
    ]
    return [f"NOT COMPILED: {warned[0][:200]}".replace("|", "/")] if warned else []


def check_models(out: Path) -> tuple[str, str, str, str]:
    start = time.perf_counter()
    done = _run(_rlrm("models", "prepare"), timeout=600, log=out / "models.log")
    took = f"{time.perf_counter() - start:.0f}"
    if done.returncode:
        return ("tiny models (rlrm models prepare)", "FAILED", took, _failed(done))
    built = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("building tiny")]
    return ("tiny models (rlrm models prepare)", "ok", took, f"built: {', '.join(built) or 'none (cached)'}")


def tier_row(xml: Path, seconds: float, rc: int = 0) -> tuple[str, str, str, str]:
    """The tier's row, from its JUnit XML; `rc` 124 (gpu_check.sh's `timeout`): stopped by the budget."""
    cut = rc == 124
    if not xml.exists():
        why = "stopped by the budget before it wrote its JUnit XML" if cut else "no JUnit XML written"
        return ("gpu test tier (pytest -m gpu)", "STOPPED" if cut else "FAILED", f"{seconds:.0f}", why)
    suite = ET.parse(xml).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    total, failures, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    bad = [
        case.get("name")
        for case in suite.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    passed = total - failures - errors - skipped
    result = "ok" if not bad and passed > 0 else "FAILED"
    detail = f"{passed} passed, {failures + errors} failed, {skipped} skipped" + (
        f": {', '.join(bad[:6])}" if bad else ""
    )
    if cut:
        result, detail = "STOPPED", f"stopped by the budget after {detail}"
    return ("gpu test tier (pytest -m gpu)", result, f"{seconds:.0f}", detail)


def _num(value, spec: str = ".2f") -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "?"


def _metrics(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def check_train(out: Path, device: str, profile: str, steps: int, extra: list[str]) -> tuple[str, str, str, str]:
    name = f"rlrm train --profile {profile} ({steps} steps)"
    run = out / profile
    start = time.perf_counter()
    cmd = _rlrm("train", "--profile", profile, "--steps", str(steps), "--out", str(run), "--overwrite")
    done = _run(cmd + _sets([*QUIET, f"trainer.device={device}", *extra]), timeout=400, log=out / f"{profile}.log")
    took = f"{time.perf_counter() - start:.0f}"
    rows = [r for r in _metrics(run) if r.get("step", 0) >= 1]
    if done.returncode or len(rows) < steps:
        return (name, "FAILED", took, _failed(done))
    step_s = statistics.median(r["timing_s/step"] for r in rows)
    memory = max(r["perf/max_memory_gb"] for r in rows)
    figures = [f"{step_s:.2f} s/step", f"peak {memory:.2f} GiB"]
    acc = [r["val/accuracy"] for r in _metrics(run) if "val/accuracy" in r]
    if len(acc) >= 2:
        figures.append(f"held-out accuracy {acc[0]:.3f} -> {acc[-1]:.3f}")
    scores = [r["critic/score/mean"] for r in rows]
    figures.append(f"score {scores[0]:.2f} -> {scores[-1]:.2f}")
    failures = sum(r.get("reward/failures", 0) for r in rows)
    figures.append(f"{failures:.0f} reward failures")
    return (name, "ok", took, ", ".join(figures))


def check_parity(out: Path, device: str) -> tuple[str, str, str, str]:
    name = "rlrm parity disrm (legacy bf16 vs served fp32)"
    folder = out / "parity"
    start = time.perf_counter()
    cmd = _rlrm("parity", "disrm", "--profile", "tiny-disrm", "--samples", "32", "--n", "4", "--device", device)
    cmd += ["--legacy-dtype", "bf16", "--loop-dtype", "fp32", "--out", str(folder)]
    done = _run(cmd, timeout=300, log=out / "parity.log")
    took = f"{time.perf_counter() - start:.0f}"
    summary_path = folder / "summary.json"
    if done.returncode not in (0, 1) or not summary_path.exists():
        return (name, "FAILED", took, _failed(done))
    summary = json.loads(summary_path.read_text())
    stats = summary.get("stats", {})
    figures = f"{summary.get('verdict')}: max abs diff {_num(stats.get('abs_diff_max'), '.4g')}, Spearman "
    figures += f"{_num(stats.get('spearman'), '.4f')}, {stats.get('rank_flip_groups')} groups re-ranked"
    return (name, "ok", took, figures)


def check_bench(out: Path, device: str) -> tuple[str, str, str, str]:
    name = "rlrm bench reward-latency (3 steps, 1 repeat)"
    folder = out / "bench"
    start = time.perf_counter()
    cmd = _rlrm("bench", "reward-latency", "--steps", "3", "--repeats", "1", "--modes", "sync,fully-async")
    done = _run(cmd + ["--out", str(folder), "--set", f"trainer.device={device}"], timeout=400, log=out / "bench.log")
    took = f"{time.perf_counter() - start:.0f}"
    path = folder / "summary.json"
    if done.returncode or not path.exists():
        return (name, "FAILED", took, _failed(done))
    modes = json.loads(path.read_text()).get("modes", {})
    figures = [
        f"{m} {_num(s.get('speedup_vs_sync'))}x of sync, idle trainer {_num(s.get('idle_trainer'))}"
        for m, s in modes.items()
        if m != "sync"
    ]
    return (name, "ok", took, "; ".join(figures))


def check_decode(out: Path, device: str) -> tuple[str, str, str, str]:
    graphs = "cudagraphs" if device.startswith("cuda") else "inductor"
    name = f"decoding, Qwen2.5-0.5B shape, bfloat16, 256 padded rows x 128 tokens: eager vs {graphs}"
    start = time.perf_counter()
    cmd = [sys.executable, str(REPO / "benchmarks" / "decode_speed.py"), "--device", device, "--shape", "qwen2.5-0.5b"]
    cmd += ["--dtype", "bfloat16", "--compile", graphs, "--pairs", "2", "--threads", "4"]
    cmd += ["--prompt-spread", "20"]  # prompts of 40-60 tokens: a left-padded batch, as GRPO's are
    done = _run(cmd, timeout=300, log=out / "decode_speed.log")
    took = f"{time.perf_counter() - start:.0f}"
    text = done.stdout
    if done.returncode or "median of pair ratios" not in text:
        return (name, "FAILED", took, _failed(done))
    keep = ("tokens equal", "bandwidth bound", "off ", f"{graphs} ", "median of pair ratios", "largest batch")
    lines = [" ".join(line.split()) for line in text.splitlines() if any(k in line for k in keep)]
    return (name, "ok", took, "; ".join(_fallback(done) + lines).replace("|", "/")[:700])


def check_logits(out: Path, device: str) -> tuple[str, str, str, str]:
    """One actor micro-batch at the Qwen2.5-0.5B shape with its real vocabulary, the LM head whole and in chunks."""
    name = (
        "actor micro-batch, Qwen2.5-0.5B shape and vocabulary, bf16 autocast, 16 x 512 tokens: logits whole vs chunks"
    )
    start = time.perf_counter()
    cmd = [sys.executable, str(REPO / "benchmarks" / "logits_memory.py"), "--device", device, "--dtype", "bfloat16"]
    cmd += ["--shape", "qwen2.5-0.5b", "--rows", "16", "--response", "512", "--chunks", "0,1024"]
    cmd += ["--pairs", "1", "--repeats", "2", "--threads", "4"]
    done = _run(cmd, timeout=300, log=out / "logits_memory.log")
    took = f"{time.perf_counter() - start:.0f}"
    if done.returncode or "peak GB" not in done.stdout:
        return (name, "FAILED", took, _failed(done))
    table = done.stdout.split("peak GB", 1)[1].splitlines()[1:]
    rows = [" ".join(line.split()) for line in table if line.strip()]
    return (name, "ok", took, "chunk, peak GB, s/pass, time vs whole, max dlogp: " + "; ".join(rows))


def check_step_vs_trl(
    out: Path, device: str, dtype: str, compile: str, tf32: bool = False
) -> tuple[str, str, str, str]:
    precision = f"{dtype}, TF32 products on both sides" if tf32 else dtype
    name = f"GRPO step vs TRL, Qwen2.5-0.5B shape, {precision}, rollout.compile={compile}"
    start = time.perf_counter()
    cmd = [sys.executable, str(REPO / "benchmarks" / "step_vs_trl.py"), "--trl-python", sys.executable]
    cmd += ["--device", device, "--shape", "qwen2.5-0.5b", "--dtype", dtype, "--pairs", "1", "--steps", "2"]
    cmd += [
        "--warmup",
        "1",
        "--threads",
        "4",
        "--set",
        "rollout.max_new_tokens=128",
        "--set",
        f"rollout.compile={compile}",
        "--set",
        "rollout.max_batch_size=256",  # the step's 32 x 8 samples decoded in one batch, as TRL generates them
    ]
    cmd += ["--tf32"] if tf32 else []
    done = _run(cmd, timeout=400, log=out / f"step_vs_trl_{dtype}{'_tf32' if tf32 else ''}.log")
    took = f"{time.perf_counter() - start:.0f}"
    text = done.stdout
    if done.returncode or "pair ratios" not in text:
        return (name, "FAILED", took, _failed(done))
    ratio = re.search(r"step time: .*median ([0-9.]+)", text)
    sides = {m.group(1): m.groups()[1:] for m in re.finditer(r"^(rlrm|TRL)\s+([0-9.]+)\s.*?([0-9.na]+)$", text, re.M)}
    tok_s = re.search(r"rlrm generation: ([0-9]+)", text)
    phases = re.search(r"rlrm phases \(median s\): (.*)", text)
    figures = [f"rlrm/TRL step {ratio.group(1) if ratio else '?'}"]
    for side, (median_s, memory) in sides.items():
        figures.append(f"{side} {float(median_s):.2f} s/step, peak {memory} GiB")
    if tok_s:
        figures.append(f"rlrm generation {tok_s.group(1)} tok/s")
    figures += _fallback(done)
    if phases:
        figures.append(phases.group(1)[:120])
    return (name, "ok", took, "; ".join(figures))


if __name__ == "__main__":
    sys.exit(main())
