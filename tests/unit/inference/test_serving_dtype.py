"""What a weight sync sends: fp32 master weights cast once to the replicas' narrower dtype, tied names kept tied
(rlrm/inference/weight_files.py `in_serving_dtype`, `untied`)."""

from __future__ import annotations

import torch

from rlrm.inference.weight_files import in_serving_dtype, untied


def _state():
    embed = torch.randn(6, 4)
    return {
        "model.embed_tokens.weight": embed,
        "norm.weight": torch.ones(4),
        "lm_head.weight": embed,  # tied: one tensor under two names, as a tied policy's state_dict lists it
        "position_ids": torch.arange(4),
    }


def test_floats_wider_than_the_replicas_are_cast_to_theirs_once_and_tied_names_stay_one_tensor():
    state = _state()
    sent = in_serving_dtype(state, "bfloat16")
    assert {k: v.dtype for k, v in sent.items()} == {
        "model.embed_tokens.weight": torch.bfloat16,
        "norm.weight": torch.bfloat16,
        "lm_head.weight": torch.bfloat16,
        "position_ids": torch.int64,  # not a float: as it is
    }
    assert torch.equal(sent["norm.weight"], state["norm.weight"].to(torch.bfloat16))  # the replica's own rounding
    assert list(untied(sent)) == ["model.embed_tokens.weight", "norm.weight", "position_ids"]  # sent once


def test_replicas_as_wide_as_the_weights_or_of_unknown_dtype_get_them_as_they_are():
    state = _state()
    for dtype in ("float32", None, "tf32"):
        sent = in_serving_dtype(state, dtype)
        assert all(sent[k] is state[k] for k in state)
    half = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in state.items()}
    assert all(in_serving_dtype(half, "float16")[k] is half[k] for k in half)  # as wide: the replica converts


def test_only_names_of_the_very_same_memory_are_one_tensor():
    a, b = torch.zeros(3, 2), torch.zeros(3, 2)  # equal, alike, apart
    assert list(untied({"a": a, "b": b, "a_again": a, "a_t": a.t()})) == ["a", "b", "a_t"]  # a view differs
    with torch.device("meta"):  # no memory: every data_ptr is 0, nothing may be taken for a tie
        m1, m2 = torch.empty(3, 2), torch.empty(3, 2)
    assert list(untied({"m1": m1, "m2": m2})) == ["m1", "m2"]
    assert list(in_serving_dtype({"m1": m1, "m2": m2}, "bfloat16")) == ["m1", "m2"]
