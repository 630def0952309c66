"""Tiny offline models: loadable like hub checkpoints, deterministic, safe to prepare concurrently."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import pytest
import torch

from rlrm.engine.models.tiny import TINY_MODELS, model_dir, prepare_tiny, resolve_model_path
from rlrm.engine.models.tiny_policy import build_tokenizer, new_policy
from rlrm.errors import ModelError


def test_prepared_policy_loads_with_from_pretrained(tiny_policy_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_policy_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_policy_path)
    assert model.config.model_type == "qwen2"
    text = "Tom has 12 coins. He loses 3 coins.\n12 - 3 = 9\n#### 9"
    assert tok.decode(tok(text)["input_ids"]) == text  # the Qwen2 tokenizer round-trips
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    meta = json.loads((tiny_policy_path / "meta.json").read_text())
    # a warm start with some accuracy and clear headroom
    assert 0.05 <= meta["warm_start_accuracy"] <= 0.6
    assert 300_000 < meta["parameters"] < 1_000_000


def test_recipe_is_deterministic_for_a_seed():
    torch.set_num_threads(1)
    tok_a, tok_b = build_tokenizer(0), build_tokenizer(0)
    assert tok_a.get_vocab() == tok_b.get_vocab()
    a, b, c = new_policy(tok_a, 0), new_policy(tok_b, 0), new_policy(tok_a, 1)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)


@pytest.fixture
def nothing_shipped(tmp_path, monkeypatch):
    """prepare_tiny builds (with the builders a test puts in) instead of copying the shipped seed-0 files."""
    import rlrm.engine.models.tiny as tiny

    monkeypatch.setattr(tiny, "SHIPPED_DIR", tmp_path / "nothing-shipped")


def test_concurrent_prepare_builds_once(tmp_path, tiny_policy_path, monkeypatch, nothing_shipped):
    import shutil

    import rlrm.engine.models.tiny as tiny

    builds = []

    def copy_build(dest, seed, log, root):  # stands in for the minute-long build; the locking is what is tested
        builds.append(seed)
        shutil.copytree(tiny_policy_path, dest)

    monkeypatch.setitem(tiny._BUILDERS, "policy", copy_build)
    results = []
    threads = [
        threading.Thread(
            target=lambda: results.append(prepare_tiny(("policy",), cache_dir=tmp_path, log=lambda _: None))
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds == [0]
    assert all(r["policy"] == model_dir("policy", tmp_path, 0) for r in results)
    assert not list(tmp_path.glob(".*.tmp-*"))  # no half-written folder left behind


def test_resolve_model_path(tmp_path):
    with pytest.raises(ModelError, match="unknown tiny model 'nope'; available: policy, judge, disrm"):
        resolve_model_path("tiny:nope", cache_dir=tmp_path)
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model_path("./no/such/model")
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)  # a tokenizer-only folder names a served model too
    from rlrm.inference.loading import check_model_folder

    with pytest.raises(ModelError, match="model.path '.*' is a folder but not a model"):
        check_model_folder(str(tmp_path), "model.path")  # where a model is loaded from it
    (tmp_path / "config.json").write_text("{}")
    check_model_folder(str(tmp_path), "model.path")


def test_a_model_file_this_user_cannot_read_is_named(tmp_path, monkeypatch):
    # another user's model.safetensors (0600): the run loaded, then stopped with "No such file or directory" of a
    # file that is there. Root reads anything: the permission bits are stood in for.
    import rlrm.inference.loading as loading

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"\0")
    monkeypatch.setattr(loading.os, "access", lambda p, mode: Path(p).name != "model.safetensors")
    with pytest.raises(ModelError, match=r"model.path '.*': this user cannot read model.safetensors in it"):
        loading.check_model_folder(str(tmp_path), "model.path")


@pytest.mark.parametrize("name", ["judge", "disrm"])
def test_reward_models_resolve_and_start_from_the_same_seed_policy(
    name, tmp_path, tiny_policy_path, monkeypatch, capsys, nothing_shipped
):
    """`tiny:judge` / `tiny:disrm` prepare the policy of their seed first, then record what they measured."""
    import shutil

    import rlrm.engine.models.tiny as tiny

    monkeypatch.setitem(tiny._BUILDERS, "policy", lambda dest, seed, log, root: shutil.copytree(tiny_policy_path, dest))
    started_from = []

    def fake_build(dest, seed, log, policy_dir):  # the recipe itself is tested below and in the slow tier
        started_from.append(policy_dir)
        shutil.copytree(policy_dir, dest)
        return {
            "auc": 0.95,
            "auc_policy_samples": 0.94,
            "auc_near_misses": 0.96,
            "verdict_accuracy": 0.9,
            "build_s": 1.0,
        }

    monkeypatch.setattr(tiny, f"build_{name}", fake_build)
    path = resolve_model_path(f"tiny:{name}", cache_dir=tmp_path)
    assert path == str(model_dir(name, tmp_path, 0))
    assert started_from == [model_dir("policy", tmp_path, 0)]
    meta = json.loads((model_dir(name, tmp_path, 0) / "meta.json").read_text())
    assert meta["auc"] == 0.95 and meta["seed"] == 0 and meta["policy"] == model_dir("policy", tmp_path, 0).name
    assert "held-out ROC AUC 0.950" in tiny.summary(name, path)
    assert f"building tiny {name} (seed 0)" in capsys.readouterr().err  # a build on first use says so


def test_models_prepare_builds_all_and_reports_auc(tmp_path, tiny_policy_path, monkeypatch, nothing_shipped):
    import shutil

    from typer.testing import CliRunner

    import rlrm.engine.models.tiny as tiny
    from rlrm.cli.main import app

    def fake(name):
        def build(dest, seed, log, root):
            shutil.copytree(tiny_policy_path, dest)
            if name != "policy":
                metrics = {"auc": 0.93, "auc_policy_samples": 0.92, "auc_near_misses": 0.94}
                (dest / "meta.json").write_text(
                    json.dumps(metrics | ({"verdict_accuracy": 0.91} if name == "judge" else {}))
                )

        return build

    for name in TINY_MODELS:
        monkeypatch.setitem(tiny._BUILDERS, name, fake(name))
    result = CliRunner().invoke(app, ["models", "prepare", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "policy: " in result.output and "held-out greedy accuracy" in result.output
    assert (
        "judge: " in result.output
        and "held-out ROC AUC 0.930" in result.output
        and "verdict accuracy 0.910" in result.output
    )
    assert "disrm: " in result.output
    pairs = tmp_path / f"pairs-v{tiny.RECIPE_VERSION}-seed0.jsonl"  # for `rlrm eval rm --pairs`, next to the models
    assert f"pairs: {pairs}" in result.output and len(pairs.read_text().splitlines()) == 192
    result = CliRunner().invoke(app, ["models", "prepare", "--cache-dir", str(tmp_path), "--name", "disrm"])
    assert result.exit_code == 0 and "judge" not in result.output and "tiny disrm is ready" in result.output


# --- the reward-model recipes, on a few steps --------------------------------------------------
def test_roc_auc_by_hand():
    from rlrm.engine.models.tiny_pairs import roc_auc

    # positives 0.9, 0.4; negatives 0.5, 0.1: of the 4 (pos, neg) pairs 3 are ordered right -> 0.75
    assert roc_auc([0.9, 0.4, 0.5, 0.1], [1, 1, 0, 0]) == pytest.approx(0.75)
    # a tie counts half: (0.5 vs 0.5) -> (1 + 0.5) / 2
    assert roc_auc([0.5, 0.9, 0.5, 0.1], [1, 1, 0, 0]) == pytest.approx((2 + 1.5) / 4)
    assert math.isnan(roc_auc([0.1, 0.2], [1, 1]))  # no negatives: undefined


def test_written_near_misses_are_labelled_as_the_rule_labels_them():
    import random

    from rlrm.engine.models.tiny_pairs import reward_problems, right_response, wrong_response
    from rlrm.engine.rewards.gsm8k import compute_score

    train, heldout = reward_problems(0, 200, 50)
    assert not {ex.extra_info["question"] for ex in heldout} & {ex.extra_info["question"] for ex in train}
    rng = random.Random(0)
    pairs = [right_response(ex, rng) for ex in train] + [wrong_response(ex, rng) for ex in train]
    assert all(p.label == compute_score(p.response, p.example.ground_truth) for p in pairs)
    assert {p.kind for p in pairs} == {"correct", "odd", "result", "final", "operand"}


def _state_hash(model) -> str:
    import hashlib

    digest = hashlib.sha256()
    for key, value in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(value.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize("name", ["judge", "disrm"])
def test_reward_model_builds_are_deterministic(name, tmp_path, tiny_policy_path):
    """The full build code path on a few steps: the same seed gives the same weights, another seed others."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    if name == "judge":
        from rlrm.engine.models.tiny_judge import JudgeRecipe as Recipe
        from rlrm.engine.models.tiny_judge import build_judge as build
    else:
        from rlrm.engine.models.tiny_disrm import DisRMRecipe as Recipe
        from rlrm.engine.models.tiny_disrm import build_disrm as build
    loader = AutoModelForCausalLM if name == "judge" else AutoModelForSequenceClassification
    hashes, metrics = [], []
    for run, seed in enumerate((0, 0, 1)):
        metrics.append(build(tmp_path / str(run), seed, lambda _: None, tiny_policy_path, Recipe.smoke()))
        hashes.append(_state_hash(loader.from_pretrained(tmp_path / str(run))))
    assert hashes[0] == hashes[1] != hashes[2]
    assert {k: v for k, v in metrics[0].items() if k != "build_s"} == {
        k: v for k, v in metrics[1].items() if k != "build_s"
    }
    assert 0.0 <= metrics[0]["auc"] <= 1.0 and metrics[0]["heldout_pairs"] > 0


def test_disrm_scores_as_the_server_scores(tmp_path, tiny_policy_path):
    """What the build measures is what `/classify` returns: same rendering, right padding, last-token pooling."""
    import random

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from rlrm.engine.models.tiny_disrm import DisRMRecipe, build_disrm, score
    from rlrm.engine.models.tiny_pairs import reward_problems, right_response, wrong_response
    from rlrm.engine.rewards.disrm import render_conversation
    from rlrm.launch.server.backends import ClassifierBackend, ServerConfig

    build_disrm(tmp_path / "disrm", 0, lambda _: None, tiny_policy_path, DisRMRecipe.smoke())
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "disrm").eval()
    tok = AutoTokenizer.from_pretrained(tmp_path / "disrm")
    assert model.config.num_labels == 1 and model.config.num_hidden_layers == 3
    _, problems = reward_problems(0, 10, 6)
    rng = random.Random(0)
    pairs = [f(ex, rng) for ex in problems for f in (right_response, wrong_response)]
    backend = ClassifierBackend(ServerConfig(model_path=str(tmp_path / "disrm"), role="disrm"))
    served = backend._forward([render_conversation(tok, p.example.prompt, p.response) for p in pairs])
    assert score(model, tok, pairs) == pytest.approx(served, abs=1e-5)


def test_judge_output_is_what_the_genrm_client_parses():
    """The tiny-genrm profile asks with the judge's own template and reads its verdicts as trained."""
    from rlrm.config.loader import load_profile
    from rlrm.config.schema import PROMPT_SUFFIX, SyntheticConfig
    from rlrm.engine.data.synthetic import synthetic_splits
    from rlrm.engine.models.tiny_judge import (
        JUDGE_TEMPLATE,
        MAX_NEW_TOKENS,
        MAX_SCORE,
        VERDICT,
        judge_answer,
        judge_messages,
    )
    from rlrm.engine.rewards.base import RewardSample
    from rlrm.engine.rewards.genrm import judge_prompt, parse_verdict

    genrm = load_profile("tiny-genrm").reward.genrm
    assert genrm.template == JUDGE_TEMPLATE and genrm.verdict == VERDICT and genrm.max_score == MAX_SCORE
    assert genrm.max_tokens >= MAX_NEW_TOKENS  # room for the answer the build measured
    ex = synthetic_splits(SyntheticConfig(num_train=1, num_test=1), PROMPT_SUFFIX)[1][0]
    response = f"{ex.extra_info['solution'].split(' = ')[0]} = 7\n#### 7"
    sample = RewardSample(ex.uid, 0, ex.data_source, ex.prompt, response, ex.ground_truth, ex.extra_info)
    assert judge_messages(ex, response) == [{"role": "user", "content": judge_prompt(genrm.template, sample)}]

    def read(text):
        return parse_verdict(text, genrm.verdict, genrm.max_score)

    assert judge_answer("3 + 4 = 7\n#### 7", "7") == "7-7 correct\nScore: 10"
    assert judge_answer("12 + 7 = 20\n#### 20", "19") == "2-1 wrong 0-9 wrong\nScore: 0"
    assert judge_answer("12 + 7 = 19\n#### 9", "19") == "0-1 wrong 9-9 correct\nScore: 0"
    assert read("7-7 correct\nScore: 10") == 1.0 and read("2-1 wrong 0-9 wrong\nScore: 0") == 0.0
    assert read(judge_answer("no answer here", "19")) == 0.0 and read("2-1 wrong") is None
    assert load_profile("tiny-disrm").reward.server.model == "tiny:disrm"


# --- the real builds (minutes each): the bar -------------------------------------------
@pytest.fixture(scope="module")
def tiny_judge_path(tiny_policy_path):
    return resolve_model_path("tiny:judge")


@pytest.fixture(scope="module")
def tiny_disrm_path(tiny_policy_path):
    return resolve_model_path("tiny:disrm")


@pytest.mark.slow
def test_prepared_judge_separates_right_from_wrong(tiny_judge_path):
    meta = json.loads((model_dir("judge") / "meta.json").read_text())
    assert meta["auc"] >= 0.9 and meta["auc_policy_samples"] >= 0.9 and meta["auc_near_misses"] >= 0.9
    assert meta["verdict_accuracy"] >= 0.9 and meta["parsed"] >= 0.95


@pytest.mark.slow
def test_prepared_disrm_separates_right_from_wrong(tiny_disrm_path, tiny_policy_path):
    """The AUC in meta.json, and again from the saved model on held-out pairs drawn afresh."""
    import random

    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from rlrm.engine.models.tiny_disrm import DisRMRecipe, score
    from rlrm.engine.models.tiny_pairs import auc_report, heldout_pairs, reward_problems

    meta = json.loads((model_dir("disrm") / "meta.json").read_text())
    assert meta["auc"] >= 0.9 and meta["auc_policy_samples"] >= 0.9 and meta["auc_near_misses"] >= 0.9
    torch.manual_seed(123)
    tok = AutoTokenizer.from_pretrained(tiny_disrm_path)
    policy = AutoModelForCausalLM.from_pretrained(tiny_policy_path).eval()
    recipe = DisRMRecipe()
    _, heldout = reward_problems(0, recipe.num_train, recipe.num_test)  # the build's held-out problems, answered afresh
    pairs = heldout_pairs(policy, tok, heldout, random.Random(123))
    model = AutoModelForSequenceClassification.from_pretrained(tiny_disrm_path).eval()
    assert auc_report(score(model, tok, pairs), pairs)["auc"] >= 0.9


def test_an_interrupted_force_rebuild_keeps_the_previous_build_and_leaves_no_temp_folder(tmp_path, monkeypatch):
    # --force removed the build first: Ctrl-C mid-recipe lost it, and the temp folder stayed for good
    import json

    import rlrm.engine.models.tiny as tiny
    from rlrm.engine.models.tiny import model_dir, prepare_tiny

    def good_build(dest, seed, log, root):
        dest.mkdir(parents=True)
        (dest / "meta.json").write_text(json.dumps({"seed": seed, "build": "good"}))

    def interrupted_build(dest, seed, log, root):
        dest.mkdir(parents=True)
        (dest / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt  # Ctrl-C during the minutes-long recipe

    monkeypatch.setitem(tiny._BUILDERS, "policy", good_build)
    prepare_tiny(("policy",), cache_dir=tmp_path, seed=1, log=lambda _: None)  # a complete build (seed 1: built)
    final = model_dir("policy", tmp_path, 1)
    assert (final / "meta.json").is_file()

    monkeypatch.setitem(tiny._BUILDERS, "policy", interrupted_build)
    with pytest.raises(KeyboardInterrupt):
        prepare_tiny(("policy",), cache_dir=tmp_path, seed=1, force=True, log=lambda _: None)

    left = sorted(p.name for p in tmp_path.iterdir() if ".tmp-" in p.name)
    problems = []
    if not (final / "meta.json").is_file():
        problems.append("the complete build was deleted before the rebuild finished")
    if left:
        problems.append(f"half-built temp folders left behind: {left}")
    assert not problems, "; ".join(problems)


def test_a_build_folder_of_another_live_builder_is_left_alone(tmp_path):
    # an older rlrm takes another lock (one per model name): a build it has under way is not "stale" while it runs;
    # one named with this process's own pid is a leftover (a container reuses pids): swept, not built over
    import os

    from rlrm.engine.models.tiny import _builder_alive

    assert _builder_alive(tmp_path / f".policy-v3-seed0.tmp-{os.getppid()}")  # the test runner's parent: alive
    assert not _builder_alive(tmp_path / f".policy-v3-seed0.tmp-{os.getpid()}")
    assert not _builder_alive(tmp_path / ".policy-v3-seed0.tmp-999999999")  # no such process
    assert not _builder_alive(tmp_path / ".policy-v3-seed0.tmp-x")
