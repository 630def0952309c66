"""`rollout.top_k: 0` (off, as in HF/TRL; rlrm's SamplingParams takes -1 or 0 for off) goes to every engine as -1.

SGLang refuses 0 (SamplingParams.verify: "top_k must be -1 (disable) or at least 1, got 0.") and every /generate
of an SGLang rollout fleet answered 400 at the first step; vLLM takes -1 in every release (0.32: 0 or -1, older
releases refused 0), as does rlrm's embedded server (which speaks SGLang's wire)."""

from __future__ import annotations

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.scheduling.requests import sampling_params
from rlrm.inference.base import SamplingParams
from rlrm.launch.client.wire import wire_for


def _sglang_takes(top_k: int) -> bool:
    """SGLang's own check (python/sglang/srt/sampling/sampling_params.py: __init__ maps -1 to all, then verify)."""
    top_k = 1 << 30 if top_k == -1 else top_k
    return top_k >= 1


@pytest.mark.parametrize("backend", ["sglang", "embedded", "vllm"])
@pytest.mark.parametrize(("top_k", "sent"), [(0, -1), (-1, -1), (1, 1), (40, 40)])
def test_top_k_off_is_sent_as_minus_one(backend, top_k, sent):
    wire = wire_for(backend, "m")
    body = wire.request([5, 6], SamplingParams(top_k=top_k), seed=1)
    params = body.get("sampling_params", body)  # SGLang's native /generate nests them; vLLM's completions not
    assert params["top_k"] == sent
    if wire.batchable:  # SGLang's batch form: a list of sampling_params
        many = wire.request_many([([5, 6], SamplingParams(top_k=top_k), 1), ([7], SamplingParams(top_k=top_k), 2)])
        assert [p["top_k"] for p in many["sampling_params"]] == [sent, sent]


def test_a_profile_with_top_k_zero_on_sglang_servers_sends_what_sglang_takes():
    overrides = ["rollout.backend=server", "rollout.server.backend=sglang", "rollout.top_k=0"]
    body = wire_for("sglang").request([5, 6], sampling_params(load_profile("tiny-rule", overrides)), seed=1)
    assert _sglang_takes(body["sampling_params"]["top_k"])
