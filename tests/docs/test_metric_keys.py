"""docs/metrics.md names every metric a run writes: a one-step tiny-genrm run's keys are all in its table.

The table's first column holds the keys as code spans, with `{a,b}` for alternatives and `<name>` for a part
that varies (`reward/component/<name>/mean`). A key added to the engine without a row here fails this test.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train

PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
SMALL = [
    "data.train_batch_size=4",
    "actor.mini_batch_size=2",
    "actor.micro_batch_size=4",
    "rollout.n=4",
    "rollout.max_new_tokens=12",
    "data.val_size=8",
    "trainer.total_steps=1",
    "trainer.num_threads=1",
    "logging.console=none",
]


def documented_patterns(text: str) -> list[re.Pattern]:
    """One regex per key spelled in the first cell of the page's metric table rows."""
    patterns = []
    for line in text.splitlines():
        cell = re.match(r"^\|([^|]*)\|", line)
        if not cell:
            continue
        for spelled in re.findall(r"`([a-z_0-9]+(?:/[^`]*)?)`", cell.group(1)):
            parts = re.split(r"(\{[^}]*\}|<[^>]+>)", spelled)
            choices = [p[1:-1].split(",") if p.startswith("{") else ["<>"] if p.startswith("<") else [p] for p in parts]
            for combo in itertools.product(*choices):
                regex = "".join("[^/]+" if c == "<>" else re.escape(c) for c in combo)
                patterns.append(re.compile(regex + "$"))
    return patterns


def undocumented(keys, patterns) -> list[str]:
    return sorted(k for k in keys if not any(p.match(k) for p in patterns))


def test_the_table_parser_expands_alternatives_and_placeholders():
    patterns = documented_patterns(
        "| `actor/{pg_loss,lr}`, `step` | x |\n| `reward/component/<name>/{mean,max}` | y |\n| not code | z |"
    )
    keys = ["actor/pg_loss", "actor/lr", "step", "reward/component/format/max", "reward/component/a/b/max"]
    assert undocumented(keys, patterns) == ["reward/component/a/b/max"]  # <name> is one path part
    assert undocumented(["actor/entropy", "val/score_mean"], patterns) == ["actor/entropy", "val/score_mean"]


@pytest.fixture(scope="module")
def genrm_keys(tmp_path_factory, tiny_policy_path):
    run_dir = start_run(load_profile("tiny-genrm", SMALL), tmp_path_factory.mktemp("keys") / "run")
    train(run_dir)
    return set().union(*(row.keys() for row in read_metrics(run_dir / "metrics.jsonl")))


def test_every_key_a_genrm_run_writes_is_documented(genrm_keys):
    assert {"val/accuracy", "reward/rule_agreement", "guard/divergence", "perf/wall_s"} <= genrm_keys
    missing = undocumented(genrm_keys, documented_patterns(PAGE.read_text(encoding="utf-8")))
    assert not missing, f"docs/metrics.md has no row for {', '.join(missing)}"
