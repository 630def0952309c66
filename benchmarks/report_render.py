"""How long `rlrm report` takes for several long runs (target: 5 runs x 10,000 steps in < 10 s).

    .venv/bin/python benchmarks/report_render.py                 # 5 runs x 10,000 steps, PNG
    .venv/bin/python benchmarks/report_render.py --html --format svg

Writes synthetic run folders (rlrm/report/synthetic.py: ~45 metrics per row, a trace with 14
spans per step) into a temp dir, then times `rlrm report` on all of them in a fresh subprocess,
so the number includes interpreter start and imports, as a user would see it. Writing the
folders is not timed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CLI = (
    "import sys, typer\n"
    "from rlrm.cli.report import report\n"
    "app = typer.Typer(add_completion=False)\n"
    "app.command()(report)\n"
    "sys.argv = ['rlrm-report', *sys.argv[1:]]\n"
    "app()\n"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3, help="timed renders; the best and median are printed")
    parser.add_argument("--format", default="png", choices=("png", "svg", "pdf"))
    parser.add_argument("--html", action="store_true")
    args = parser.parse_args()

    from rlrm.report.synthetic import write_run

    modes = ("sync", "stream", "pipeline", "one-step-off", "fully-async")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        runs = [
            write_run(tmp / f"run-{i}", steps=args.steps, mode=modes[i % len(modes)], seed=i) for i in range(args.runs)
        ]
        size_mb = sum(f.stat().st_size for run in runs for f in run.iterdir()) / 2**20
        print(f"wrote {args.runs} runs x {args.steps} steps ({size_mb:.0f} MiB) in {time.perf_counter() - t0:.1f} s")
        cmd = [sys.executable, "-c", _CLI, *map(str, runs), "--out", str(tmp / "report"), "--format", args.format]
        if args.html:
            cmd.append("--html")
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True)
            times.append(time.perf_counter() - start)
            if done.returncode != 0:
                sys.exit(f"rlrm report failed:\n{done.stderr}")
        print(done.stdout.strip())
        times.sort()
        print(
            f"rlrm report, {args.runs} runs x {args.steps} steps: best {times[0]:.2f} s, "
            f"median {times[len(times) // 2]:.2f} s over {len(times)} renders (target < 10 s)"
        )


if __name__ == "__main__":
    main()
