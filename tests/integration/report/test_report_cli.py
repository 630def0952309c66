"""`rlrm report` end to end through CliRunner: files, summary.md numbers, a self-contained HTML, errors."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from rlrm.cli.report import report

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command("report")(report)


@app.callback()
def _group() -> None:
    """Keeps `report` a subcommand, as under `rlrm`."""


runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, ["report", *map(str, args)])


def one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.fixture(scope="module")
def full_report(folders, tmp_path_factory):
    out = tmp_path_factory.mktemp("report-out")
    result = invoke(folders["a"], folders["b"], folders["bench"], folders["parity"], "--out", out, "--html")
    assert result.exit_code == 0, result.output
    return out, result


def test_every_figure_is_written(full_report):
    out, result = full_report
    expected = {
        "curve_reward",
        "curve_val_accuracy",
        "curve_response_length",
        "curve_kl",
        "curve_entropy",
        "curve_grad_norm",
        "curve_throughput",
        "timeline",
        "bench_throughput",
        "bench_idle",
        "bench_hiding",
        "bench_step_time",
        "bench_latency",
        "bench_timeline",
        "parity_scatter",
        "parity_residuals",
        "parity_rank_flips",
        "parity_train",
    }
    assert {p.stem for p in out.glob("*.png")} == expected
    assert f"wrote {len(expected)} figures, summary.md and report.html to {out}" in result.output


def test_summary_numbers_equal_inputs(full_report, folders):
    summary = (full_report[0] / "summary.md").read_text()
    last = json.loads((folders["a"] / "metrics.jsonl").read_text().splitlines()[-1])
    # run a: 12 steps, 13 rows (val-only step 0), final reward = its last critic/score/mean
    assert re.search(rf"\| a \| sync \| 12 \| 13 \| 0 \| {last['critic/score/mean']:.4g} \|", summary)
    # benchmark, mean over 2 repeats: tokens/s 525, samples/s 10.5, speedup 1.05 for sync under latency
    assert "| sync | 2 | 525 | 10.5 | 1.05 |" in summary
    assert "| one-step-off | 2 | 1025 | 20.5 | 2.05 |" in summary
    parity_summary = json.loads((folders["parity"] / "summary.json").read_text())
    assert f"| max_abs_diff | {parity_summary['max_abs_diff']:.6g} |" in summary
    assert "| verdict | pass |" in summary
    assert "![bench_idle](bench_idle.png)" in summary
    # the synthetic benchmark has the columns of an older rlrm: read all the same, and what it lacks is said
    assert "written by an older rlrm without of_limit" in summary + full_report[1].output


def test_html_is_self_contained(full_report):
    page = (full_report[0] / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.IGNORECASE)
    assert "<script" not in page.lower() and "<link" not in page.lower()
    assert page.count('src="data:image/png;base64,') == 18
    assert "<td>525</td>" in page


def test_html_inline_svg(folders, tmp_path):
    result = invoke(folders["parity"], "--out", tmp_path, "--html", "--format", "svg")
    assert result.exit_code == 0, result.output
    page = (tmp_path / "report.html").read_text()
    assert page.count("<svg") == 4 and "<?xml" not in page and "<img" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.IGNORECASE)
    assert (tmp_path / "parity_scatter.svg").is_file()


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_html_renders_in_headless_chromium(full_report, tmp_path):
    from PIL import Image

    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            "chromium",
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            f"--screenshot={shot}",
            "--window-size=1200,2000",
            (full_report[0] / "report.html").as_uri(),
        ],
        check=True,
        timeout=60,
        capture_output=True,
    )
    image = Image.open(shot).convert("L")
    low, high = image.getextrema()
    assert high - low > 100  # not a blank page


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_html_tables_stay_inside_the_page(full_report, tmp_path):
    """The widest table (the benchmark's, 15 columns) scrolls in its own box: the page is no wider than the window."""
    page = (full_report[0] / "report.html").read_text()
    probe = tmp_path / "probe.html"
    measure = "<script>document.title = document.documentElement.scrollWidth + ' ' + window.innerWidth;</script>"
    probe.write_text(page.replace("</body>", measure + "</body>"))
    done = subprocess.run(
        [
            "chromium",
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--window-size=900,2000",
            "--dump-dom",
            probe.as_uri(),
        ],
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    page_width, window = map(int, re.search(r"<title>(\d+) (\d+)</title>", done.stdout).groups())
    assert page_width <= window, f"the page is {page_width} px wide in a {window} px window"


def test_bad_inputs_are_one_line_errors(folders, tmp_path):
    assert "expected metrics.jsonl" in one_line_error(invoke(tmp_path, "--out", tmp_path / "o"))
    line = one_line_error(invoke(folders["a"], "--metrics", "actor/entrop", "--out", tmp_path / "o"))
    assert "matches no metric" in line and "actor/entropy" in line
    assert "--x" in one_line_error(invoke(folders["a"], "--x", "tokens", "--out", tmp_path / "o"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text("")
    assert "no complete rows" in one_line_error(invoke(tmp_path / "empty", "--out", tmp_path / "o"))


def test_a_missing_matplotlib_is_one_line_naming_the_extra(folders, tmp_path, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else find_spec(name, *a)
    )
    line = one_line_error(invoke(folders["a"], "--out", tmp_path / "o"))
    assert "pip install 'rlrm[report]'" in line and "matplotlib" in line
    assert not (tmp_path / "o").exists()


def test_crashed_run_and_disjoint_metrics(folders, tmp_path):
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    rows = (folders["a"] / "metrics.jsonl").read_text().splitlines()[:6]
    rows = [json.dumps({k: v for k, v in json.loads(r).items() if k != "actor/entropy"}) for r in rows]
    (crashed / "metrics.jsonl").write_text("\n".join(rows) + '\n{"step": 6, "critic/sc')
    result = invoke(folders["a"], crashed, "--out", tmp_path / "o", "--metrics", "critic/score/mean,actor/entropy")
    assert result.exit_code == 0, result.output
    assert "note: crashed: skipped 1 incomplete line(s) of metrics.jsonl, used 6 complete row(s)" in result.output
    assert "note: left out actor/entropy: not in every run (missing in crashed)" in result.output
    assert {p.stem for p in (tmp_path / "o").glob("*.png")} == {"curve_critic-score-mean", "timeline"}
    summary = (tmp_path / "o" / "summary.md").read_text()
    assert "| crashed | n/a | 5 | 6 | 1 |" in summary and "left out actor/entropy" in summary


def test_time_axis_and_smoothing(folders, tmp_path):
    result = invoke(folders["a"], folders["b"], "--x", "time", "--smooth", "0.8", "--steps", "3:3", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "curve_reward.png").is_file() and (tmp_path / "timeline.png").is_file()


def test_cli_module_imports_nothing_heavy():
    code = (
        "import sys, rlrm.cli.report; print(','.join(m for m in ('matplotlib', 'pandas', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_pdf_figures_embed_as_png(folders, tmp_path):
    result = invoke(folders["parity"], "--out", tmp_path, "--html", "--format", "pdf")
    assert result.exit_code == 0, result.output
    assert {p.stem for p in tmp_path.glob("*.pdf")} == {
        "parity_scatter",
        "parity_residuals",
        "parity_rank_flips",
        "parity_train",
    }
    assert (tmp_path / "report.html").read_text().count('src="data:image/png;base64,') == 4


def test_parity_matrix_folder_reads_as_its_pairs(tmp_path):
    from rlrm.report.synthetic import write_parity

    matrix = tmp_path / "matrix"
    write_parity(matrix / "legacy-bfloat16-vs-loop-float32", groups=4, seed=0)
    write_parity(matrix / "legacy-float32-vs-loop-float32", groups=4, seed=1, noise=0.0)
    (matrix / "matrix.json").write_text(json.dumps({"cells": []}))
    result = invoke(matrix, "--out", tmp_path / "o")
    assert result.exit_code == 0, result.output
    stems = {p.stem for p in (tmp_path / "o").glob("*.png")}
    assert "parity-legacy-float32-vs-loop-float32_scatter" in stems and len(stems) == 6
    summary = (tmp_path / "o" / "summary.md").read_text()
    assert "## Parity legacy-bfloat16-vs-loop-float32" in summary


def test_a_benchmark_results_csv_cut_inside_its_last_row_is_refused(folders, tmp_path):
    # a copy cut short parses (its last row holds "1.0" of "1.05"): the table would change with no word; refused
    # as `rlrm bench simulate --from` refuses it, naming the file and the row
    bench = tmp_path / "bench"
    shutil.copytree(folders["bench"], bench)
    table = bench / "results.csv"
    text = table.read_text()
    rows = text.count("\n") - 1
    table.write_text(text[: text.rstrip("\n").rfind(",") + 3])
    line = one_line_error(invoke(bench, "--out", tmp_path / "o"))
    assert f"{table} row {rows} is cut short" in line and "truncated" in line
    assert not (tmp_path / "o").exists()  # nothing half-written
    # a row with a field too few (cut and a newline added after it) is refused too
    table.write_text(text[: text.rstrip("\n").rfind(",")] + "\n")
    line = one_line_error(invoke(bench, "--out", tmp_path / "o"))
    assert f"{table} row {rows} has" in line and "fields" in line
