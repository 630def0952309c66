"""`rlrm train` with the tiny GenRM judge: the reward contract in the run folder and in every sample, the reward
cache in front of the judge, and a resume whose judge template changed (stopped, or recorded when allowed)."""

from __future__ import annotations

import json
from collections import defaultdict

import yaml
from small_run import SMALL_RUN, as_set_args
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.engine.metrics.metrics_file import read_metrics

# two steps' checkpoints (the resume) and every sample logged (the contract per sample)
SMALL = [*SMALL_RUN, "trainer.save_every=1", "logging.save_samples=true"]
SAMPLES_PER_STEP = 4 * 2  # data.train_batch_size x rollout.n of SMALL_RUN


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def samples(run) -> list[dict]:
    return [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]


def test_tiny_genrm_caches_judgements_and_a_changed_template_stops_the_resume(tmp_path, tiny_policy_path):
    run = tmp_path / "run"
    sets = as_set_args(*SMALL)
    result = invoke("train", "--profile", "tiny-genrm", "--steps", 2, "--out", run, "--console", "none", *sets)
    assert result.exit_code == 0, result.output

    contract = json.loads((run / "reward_contract.json").read_text())
    assert contract["parts"]["kind"]["kind"] == "genrm" and contract["parts"]["model"]["weights"].startswith("sha256:")
    rows = [r for r in read_metrics(run / "metrics.jsonl") if r["step"] > 0]
    for row in rows:  # every sample was looked up; every miss asked the judge at least once
        assert row["reward/cache_hits"] + row["reward/cache_misses"] == row["reward/samples"] == SAMPLES_PER_STEP
        assert row["reward/model_calls"] >= row["reward/cache_misses"] - row["reward/failures"]
    logged = samples(run)
    assert {s["reward_contract"] for s in logged} == {contract["fingerprint"][:12]}
    by_pair = defaultdict(set)
    for s in logged:
        assert isinstance(s["reward_extra_info"]["reward_cached"], bool)
        by_pair[(json.dumps(s["prompt"]), s["response"])].add(s["score"])
    assert all(len(scores) == 1 for scores in by_pair.values())  # a hit gives what the judge gave
    hits = sum(r["reward/cache_hits"] for r in rows)
    assert hits == sum(s["reward_extra_info"]["reward_cached"] for s in logged)
    failures = sum(r["reward/failures"] for r in rows)  # not kept: their pair is scored again
    assert hits <= len(logged) - len(by_pair) and (failures or hits == len(logged) - len(by_pair))

    config = yaml.safe_load((run / "config.yaml").read_text())
    config["reward"]["genrm"]["template"] = config["reward"]["genrm"]["template"].replace("Problem:", "Question:")
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    refused = invoke("train", "--resume", run, "--steps", 3, "--console", "none")
    assert refused.exit_code == 1
    assert "the reward changed since this run was started: template" in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    assert max(r["step"] for r in read_metrics(run / "metrics.jsonl")) == 2  # nothing trained

    allowed = invoke(
        "train", "--resume", run, "--steps", 3, "--console", "none", "--set", "reward.allow_contract_change=true"
    )
    assert allowed.exit_code == 0, allowed.output
    record = json.loads((run / "reward_contract.json").read_text())
    assert record["changes"] == [
        {"at_step": 2, "changed": ["template"], "from": contract["fingerprint"], "to": record["fingerprint"]}
    ]
    step3 = {s["reward_contract"] for s in samples(run) if s["step"] == 3}
    assert step3 == {record["fingerprint"][:12]}
    assert "allow_contract_change" not in (run / "config.yaml").read_text() or not yaml.safe_load(
        (run / "config.yaml").read_text()
    )["reward"].get("allow_contract_change")


def test_a_cache_path_that_is_not_a_cache_is_refused_before_anything_starts(tmp_path):
    config = tmp_path / "notes.yaml"
    config.write_text("name: not a cache\n")
    run = tmp_path / "run"
    result = invoke("train", "--profile", "tiny-genrm", "--out", run, "--set", f"reward.cache.path={config}")
    assert result.exit_code == 1
    assert f"reward.cache.path {config} is not an rlrm reward cache: it is not a SQLite file" in result.output
    assert not run.exists() and config.read_text() == "name: not a cache\n"
