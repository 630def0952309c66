"""What a weight sync sends: floats cast to the replicas' narrower dtype one tensor at a time, modules the
architecture keeps in fp32 left in fp32, tied names sent once (rlrm/inference/weight_files.py `ServingCast`,
`untied`)."""

from __future__ import annotations

import torch

from rlrm.inference.weight_files import ServingCast, WeightFiles, untied


def _state():
    embed = torch.randn(6, 4)
    return {
        "model.embed_tokens.weight": embed,
        "model.norm.weight": torch.ones(4),
        "model.layers.0.mlp.gate.e_score_correction_bias": torch.zeros(4),
        "lm_head.weight": embed,  # tied: one tensor under two names, as a tied policy's state_dict lists it
        "position_ids": torch.arange(4),
    }


def test_floats_wider_than_the_replicas_go_in_theirs_but_modules_kept_in_fp32():
    cast = ServingCast("bfloat16", keep_fp32=("gate.e_score_correction_bias",))
    state = _state()
    sent = {name: cast(name, value) for name, value in untied(state).items()}
    assert {k: v.dtype for k, v in sent.items()} == {
        "model.embed_tokens.weight": torch.bfloat16,
        "model.norm.weight": torch.bfloat16,
        "model.layers.0.mlp.gate.e_score_correction_bias": torch.float32,  # a module the architecture keeps fp32
        "position_ids": torch.int64,  # not a float: as it is
    }  # lm_head.weight: tied, sent once
    assert torch.equal(sent["model.norm.weight"], state["model.norm.weight"].to(torch.bfloat16))  # the replica's own


def test_modules_kept_in_fp32_follow_transformers_rule_per_dtype():
    """transformers keeps `_keep_in_fp32_modules_strict` in fp32 in bf16 and fp16, `_keep_in_fp32_modules` in fp16
    only, each a pattern searched in the name (dotted, or a glob)."""
    names = ["model.layers.0.mlp.gate.weight", "model.layers.0.mlp.gate_proj.weight", "model.layers.0.norm.weight"]
    value = torch.zeros(2)
    for dtype, kept in (("bfloat16", {"model.layers.0.mlp.gate.weight"}), ("float16", set(names[::2]))):
        cast = ServingCast(dtype, keep_fp32=("mlp.gate.weight",), keep_fp32_in_fp16=("layers.*.norm",))
        assert {n for n in names if cast.target(n, value) == torch.float32} == kept, dtype


def test_replicas_as_wide_as_the_weights_or_of_unknown_dtype_get_them_as_they_are():
    state = _state()
    for cast in (ServingCast("float32"), ServingCast(None), ServingCast("tf32")):
        assert all(cast(k, v) is v for k, v in state.items())
    half = torch.zeros(3, dtype=torch.bfloat16)
    assert ServingCast("float16")("w", half) is half  # as wide: the replica converts it


def test_only_names_of_the_very_same_memory_are_one_tensor():
    a, b = torch.zeros(3, 2), torch.zeros(3, 2)  # equal, alike, apart
    assert list(untied({"a": a, "b": b, "a_again": a, "a_t": a.t()})) == ["a", "b", "a_t"]  # a view differs
    with torch.device("meta"):  # no memory: every data_ptr is 0, nothing may be taken for a tie
        m1, m2 = torch.empty(3, 2), torch.empty(3, 2)
    assert list(untied({"m1": m1, "m2": m2})) == ["m1", "m2"]


def test_other_views_of_one_memory_are_written_each_in_full(tmp_path):
    from safetensors.torch import load_file

    base = torch.arange(6, dtype=torch.float32)
    files = WeightFiles(str(tmp_path))
    try:
        path = files.write({"flat": base, "matrix": base.view(2, 3), "head": base[:3]}, 1)
        got = load_file(str(path / "model.safetensors"))
    finally:
        files.close()
    assert torch.equal(got["matrix"], base.view(2, 3)) and torch.equal(got["head"], base[:3])


def test_only_rlrm_s_own_replicas_get_a_tied_embedding_once():
    """vLLM's CPU build kept its lm_head stale when a sync left it out (the actor's and vLLM's log-probs then
    differed by 0.01 after the first sync: tests/integration/launch/on_vllm/test_vllm_agent.py, slow tier)."""
    from rlrm.launch.fleet.backends import BACKENDS

    assert {name for name, backend in BACKENDS.items() if backend.takes_tied_once} == {"embedded"}
    state = _state()
    assert list(ServingCast(tied_once=False).names(state)) == list(state)
    assert "lm_head.weight" not in ServingCast(tied_once=True).names(state)
