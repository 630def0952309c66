"""Tiny offline models: loadable like hub checkpoints, deterministic, safe to prepare concurrently."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from rlrm.engine.models.tiny import model_dir, prepare_tiny, resolve_model_path
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


def test_concurrent_prepare_builds_once(tmp_path, tiny_policy_path, monkeypatch):
    import shutil

    import rlrm.engine.models.tiny as tiny

    builds = []

    def copy_build(dest, seed, log):  # stands in for the minute-long build; the locking is what is tested
        builds.append(seed)
        shutil.copytree(tiny_policy_path, dest)

    monkeypatch.setitem(tiny._BUILDERS, "policy", copy_build)
    results = []
    threads = [threading.Thread(target=lambda: results.append(prepare_tiny(cache_dir=tmp_path, log=lambda _: None))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds == [0]
    assert all(r["policy"] == model_dir("policy", tmp_path, 0) for r in results)
    assert not list(tmp_path.glob(".*.tmp-*"))  # no half-written folder left behind


def test_resolve_model_path(tmp_path):
    with pytest.raises(ModelError, match="unknown tiny model 'nope'"):
        resolve_model_path("tiny:nope", cache_dir=tmp_path)
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model_path("./no/such/model")
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)
