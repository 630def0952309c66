"""The gpu tier, numbers: the same code on the CPU and on CUDA gives the same numbers.

Tolerances: float32 on both sides (TF32 stays off, torch's default for matmuls), so the two differ only by the
order of float additions: log-probs within 1e-4 absolute, DisRM scores within 1e-4. bf16 is compared with
float32 on the same device, within what bf16's 8 mantissa bits allow (0.1 on log-probs of a random model).
"""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch

from rlrm.engine.actor.batch import collate
from rlrm.engine.actor.logprobs import response_log_probs
from rlrm.inference.base import Completion, SamplingParams
from rlrm.inference.hf import HFRolloutEngine
from rlrm.inference.kv_cache import distinct_rows
from rlrm.inference.tf32 import cuda_tf32_on
from tests.fixtures.fsdp_head_chunks import BF16_GRADIENT, SAME_NUMBERS, run_ranks
from tests.gpu.device import DEVICE
from tests.unit.inference.conftest import tiny_qwen2

pytestmark = pytest.mark.gpu

LOG_PROB_ATOL = 1e-4


@pytest.fixture(scope="module")
def model():
    return tiny_qwen2(hidden_size=64, intermediate_size=128)


def _completions() -> list[Completion]:
    """Two groups of three samples (shared prompts), responses of different lengths, left-padded prompts."""
    prompts = [[5, 9, 12, 3], [7, 3]]
    responses = [[4, 8, 15, 16, 23], [42, 1], [9, 9, 9], [11, 12], [13], [14, 15, 16, 17]]
    return [Completion(prompts[i // 3], r, [0.0] * len(r), "stop", 0, {}) for i, r in enumerate(responses)]


def test_distinct_rows_builds_its_index_on_the_ids_device():
    ids = torch.tensor([[1, 2], [1, 2], [3, 4]], device=DEVICE)
    index, inverse = distinct_rows(ids, torch.ones_like(ids))
    assert index.device.type == DEVICE and inverse.device.type == DEVICE
    assert index.tolist() == [0, 2] and inverse.tolist() == [0, 0, 1]


@pytest.mark.parametrize("share", [False, True], ids=["row-by-row", "shared-prompts"])
def test_log_probs_on_cuda_equal_the_cpus(model, share):
    batch = collate(_completions(), pad_token_id=0)
    on_cpu, _ = response_log_probs(model, batch, 1.0, micro_batch_size=4, share_prompts=share)
    on_gpu, _ = response_log_probs(copy.deepcopy(model).to(DEVICE), batch.to(DEVICE), 1.0, 4, share_prompts=share)
    assert on_gpu.device.type == DEVICE
    mask = batch.response_mask.bool()
    gap = (on_gpu.cpu() - on_cpu)[mask].abs().max().item()
    assert gap < LOG_PROB_ATOL, gap


def test_bf16_log_probs_stay_near_float32_on_cuda(model):
    batch = collate(_completions(), pad_token_id=0).to(DEVICE)
    fp32, _ = response_log_probs(copy.deepcopy(model).to(DEVICE), batch, 1.0, 6)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        mixed, _ = response_log_probs(copy.deepcopy(model).to(DEVICE), batch, 1.0, 6)
    assert mixed.dtype == torch.float32  # logits are taken in float32 whatever the compute dtype
    mask = batch.response_mask.bool()
    gap = (mixed - fp32)[mask].abs().max().item()
    assert 0 < gap < 0.1, gap  # bf16 really ran (not 0), and stayed close


def test_model_tf32_rounds_cudas_float32_products_within_tf32s_precision():
    """model.tf32's setting (rlrm/inference/tf32.py): on CUDA the log-probs move (the products ran in TF32) and stay
    within what TF32's 10 mantissa bits allow of float32 (1e-2 on a random model's log-probs); the CPU's do not
    move at all. The model is wider than the tier's other one: cuBLAS keeps products with a side under 512 in
    plain float32 even where TF32 is allowed."""
    wide = tiny_qwen2(vocab_size=512, hidden_size=512, intermediate_size=1024, num_attention_heads=8).to(DEVICE)
    batch = collate(_completions(), pad_token_id=0).to(DEVICE)
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    try:
        matmul.fp32_precision = "ieee"
        exact, _ = response_log_probs(wide, batch, 1.0, 6)
        cuda_tf32_on()
        rounded, _ = response_log_probs(wide, batch, 1.0, 6)
    finally:
        matmul.fp32_precision = before
    gap = (rounded - exact)[batch.response_mask.bool()].abs().max().item()
    if DEVICE == "cpu":  # the tier's own check on the CPU (RLRM_GPU_TIER_DEVICE=cpu)
        assert gap == 0, gap
    else:
        assert 0 < gap < 1e-2, gap


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bf16-autocast"])
def test_logits_in_chunks_give_the_whole_heads_numbers_on_the_device(model, dtype):
    """actor.logits_chunk_tokens on the device: log-probs, entropy and the gradient of every weight as with the
    whole head, in float32 and under bf16 autocast (each chunk casts the head's weight anew, so its gradient adds
    up in float32: within bf16's own error of the whole head's, relative 5e-2 of the gradient's norm)."""
    batch = collate(_completions(), pad_token_id=0).to(DEVICE)
    results = []
    for chunk in (0, 3):
        on_device = copy.deepcopy(model).to(DEVICE).train()
        with torch.autocast(DEVICE, dtype=dtype, enabled=dtype != torch.float32):
            lp, ent = response_log_probs(
                on_device, batch, 0.9, 6, with_entropy=True, chunk_tokens=chunk, chunk_above_bytes=0
            )
        ((lp + 0.1 * ent) * batch.response_mask).sum().backward()
        grad = torch.cat([q.grad.flatten() for q in on_device.parameters() if q.grad is not None])
        results.append((lp.detach(), ent.detach(), grad))
    (lp0, ent0, grad0), (lp1, ent1, grad1) = results
    assert lp1.device.type == DEVICE
    mask = batch.response_mask.bool()
    tolerance = LOG_PROB_ATOL if dtype == torch.float32 else 0.1
    assert (lp1 - lp0)[mask].abs().max().item() < tolerance
    assert (ent1 - ent0)[mask].abs().max().item() < tolerance
    relative = ((grad1 - grad0).norm() / grad0.norm()).item()
    assert relative < (1e-4 if dtype == torch.float32 else 5e-2), relative


def test_an_fsdp2_rank_chunks_the_head_with_the_whole_heads_numbers(tmp_path):
    """The same on one FSDP2 rank (nccl on CUDA), as `actor.strategy: fsdp2` runs the actor: float32 log-probs,
    entropy and gradients as with the whole head (1e-4); under the ranks' bf16 mixed precision the chunks' head
    gradient no further from float32's than the whole head's (1.2x; tests/fixtures/fsdp_head_chunks.py)."""
    (tmp_path / "float32").mkdir()
    (tmp_path / "bf16").mkdir()
    run_ranks(tmp_path / "float32", SAME_NUMBERS, 1, DEVICE, "tied", "rlrm")
    run_ranks(tmp_path / "bf16", BF16_GRADIENT, 1, DEVICE)


def _generate(model, prompts, seeds, compile="off"):
    async def go():
        engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=0, compile=compile)
        try:
            return await engine.generate_many(
                prompts, [SamplingParams(max_new_tokens=12, temperature=1.0, seed=s) for s in seeds]
            )
        finally:
            await engine.close()

    return asyncio.run(go())


def test_rollout_engine_on_cuda_samples_what_the_cpu_samples(model):
    """Seeded draws come from CPU generators on every device, so the tokens match unless a draw lands within
    float noise of a boundary between two tokens (not for these seeds); the log-probs match within tolerance."""
    prompts = [[5, 9, 12, 3]] * 4 + [[7, 3]] * 4
    seeds = list(range(8))
    on_cpu = _generate(copy.deepcopy(model), prompts, seeds)
    on_gpu = _generate(copy.deepcopy(model).to(DEVICE), prompts, seeds)
    assert [c.token_ids for c in on_gpu] == [c.token_ids for c in on_cpu]
    for a, b in zip(on_cpu, on_gpu):
        assert max(abs(x - y) for x, y in zip(a.log_probs, b.log_probs)) < LOG_PROB_ATOL


def test_cuda_graph_decoding_samples_what_the_eager_loop_samples(model, capfd):
    """rollout.compile=cudagraphs against the dynamic loop, both on the device: the same tokens, log-probs within
    tolerance (the static cache attends over masked slots too: another order of float additions). The bucket's
    step is captured once, then replayed 11 times a batch; a second batch of other rows reuses the graph. On the
    CPU: the "eager" backend, the same buckets with nothing captured."""
    prompts = [[5, 9, 12, 3]] * 4 + [[7, 3]] * 4
    seeds = list(range(8))
    on_device = copy.deepcopy(model).to(DEVICE)
    eager = _generate(on_device, prompts, seeds)
    backend = "cudagraphs" if DEVICE == "cuda" else "eager"
    graphs = copy.deepcopy(model).to(DEVICE)
    engine = HFRolloutEngine(graphs, eos_token_ids=[], pad_token_id=0, compile=backend)

    async def go(prompts, seeds):
        return await engine.generate_many(
            prompts, [SamplingParams(max_new_tokens=12, temperature=1.0, seed=s) for s in seeds]
        )

    async def both():
        try:
            return await go(prompts, seeds), (await go(prompts[::-1], seeds[::-1]))[::-1]
        finally:
            await engine.close()

    for out in asyncio.run(both()):
        assert [c.token_ids for c in out] == [c.token_ids for c in eager]
        for a, b in zip(eager, out):
            assert max(abs(x - y) for x, y in zip(a.log_probs, b.log_probs)) < LOG_PROB_ATOL
    assert engine._static.captured == (1 if DEVICE == "cuda" else 0)  # one bucket, captured once, no fallback
    assert "warning: rollout.compile" not in capfd.readouterr().err


def test_a_batch_moving_to_a_smaller_captured_bucket_samples_what_the_eager_loop_samples(model):
    """20 rows in a 32-row bucket; after 4 tokens 8 are left and the batch moves to an 8-row bucket, captured
    mid-batch. Tokens as the dynamic loop's, log-probs within tolerance."""
    prompts = [[5, 9, 12, 3, i % 7 + 1] for i in range(20)]
    limits = [3] * 12 + [12] * 8
    samplings = [SamplingParams(max_new_tokens=n, temperature=1.0, seed=i) for i, n in enumerate(limits)]
    on_device = copy.deepcopy(model).to(DEVICE)
    backend = "cudagraphs" if DEVICE == "cuda" else "eager"
    outs = {}
    for compile in ("off", backend):
        engine = HFRolloutEngine(copy.deepcopy(on_device), eos_token_ids=[], pad_token_id=0, compile=compile)

        async def go(engine=engine):
            try:
                return await engine.generate_many(prompts, samplings)
            finally:
                await engine.close()

        outs[compile] = (asyncio.run(go()), engine)
    (eager, _), (graphs, engine) = outs["off"], outs[backend]
    assert [c.token_ids for c in graphs] == [c.token_ids for c in eager]
    assert [len(c.token_ids) for c in graphs] == limits
    for a, b in zip(eager, graphs):
        assert max(abs(x - y) for x, y in zip(a.log_probs, b.log_probs)) < LOG_PROB_ATOL
    assert list(engine._static._buckets) == [(32, 64), (8, 64)]
    assert engine._static.captured == (2 if DEVICE == "cuda" else 0)


def test_mixed_precision_actor_keeps_float32_master_weights_and_learns(model):
    """model.precision=mixed: the update runs under autocast to bf16, the weights and AdamW state stay float32,
    and one step on a positive advantage raises the sampled tokens' log-probs."""
    from rlrm.config.schema import ActorConfig
    from rlrm.engine.actor.actor import Actor

    policy = copy.deepcopy(model).to(DEVICE)
    cfg = ActorConfig(lr=1e-2, mini_batch_size=2, micro_batch_size=6)
    actor = Actor(policy, None, cfg, temperature=1.0, total_steps=1, n=3, compute_dtype=torch.bfloat16)
    batch = collate(_completions(), pad_token_id=0).to(DEVICE)
    batch.group_ids = torch.tensor([0, 0, 0, 1, 1, 1], device=DEVICE)
    before = actor.compute_old_log_prob(batch)
    batch.old_log_prob = before
    batch.advantages = torch.ones(6, device=DEVICE)
    metrics = actor.update(batch)
    assert all(p.dtype == torch.float32 for p in policy.parameters())
    state = actor.optimizer.state[actor.params[0]]
    assert state["exp_avg"].dtype == torch.float32
    after = actor.compute_old_log_prob(batch)
    mask = batch.response_mask.bool()
    assert (after - before)[mask].mean().item() > 0, metrics
    assert torch.isfinite(torch.tensor(metrics["actor/grad_norm"]))


def test_classifier_server_backend_scores_on_cuda_as_on_the_cpu(random_disrm_path):
    from rlrm.launch.server.backends import ClassifierBackend, ServerConfig

    sequences = [[5, 9, 12, 3, 7], [7, 3], [1, 2, 3, 4, 5, 6, 7, 8]]
    scores = {}
    for device in ("cpu", DEVICE):
        backend = ClassifierBackend(ServerConfig(model_path=str(random_disrm_path), role="disrm", device=device))
        assert next(backend.model.parameters()).device.type == device
        scores[device] = backend._forward(sequences)
    assert scores[DEVICE] == pytest.approx(scores["cpu"], abs=1e-4)


def _wide_policy():
    """A one-layer policy with a 32k vocabulary on the GPU: its logits need new blocks of CUDA memory, which a cap
    refuses (small tensors could be served from blocks the caching allocator already holds)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=32000, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)  # fmt: skip
    return Qwen2ForCausalLM(config).to(DEVICE)


def test_out_of_memory_while_generating_is_one_line_naming_the_batch_setting():
    from rlrm.errors import OutOfDeviceMemory

    if DEVICE != "cuda":
        pytest.skip("a CUDA memory cap needs CUDA")
    policy = _wide_policy()  # on the GPU before the cap: the cap meets the generation, not the copy
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(1e-6)
    try:
        with pytest.raises(OutOfDeviceMemory, match=r"^out of GPU memory while generating .*rollout\.max_batch_size"):
            _generate(policy, [[5, 9, 12, 3]] * 64, list(range(64)))  # a step's logits: 64 x 32k floats, 8 MB
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)


def test_out_of_memory_in_the_update_is_one_line_naming_the_micro_batch(model):
    from rlrm.config.loader import load_profile
    from rlrm.config.schema import ActorConfig
    from rlrm.engine.actor.actor import Actor
    from rlrm.engine.metrics.timing import StepTimer
    from rlrm.engine.step import GRPOStep, StepSettings
    from rlrm.errors import OutOfDeviceMemory

    if DEVICE != "cuda":
        pytest.skip("a CUDA memory cap needs CUDA")
    policy = _wide_policy()  # the update's logits: 120 x 6 x 32k floats, 92 MB
    actor = Actor(policy, None, ActorConfig(mini_batch_size=40, micro_batch_size=120), 1.0, total_steps=1, n=3)
    step = GRPOStep(actor, None, StepSettings.from_profile(load_profile("tiny-rule"), 0, DEVICE))
    batch = collate(_completions() * 20, pad_token_id=0).to(DEVICE)
    batch.group_ids = torch.arange(120, device=DEVICE) // 3
    batch.advantages = torch.ones(120, device=DEVICE)
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(1e-6)
    try:
        with pytest.raises(OutOfDeviceMemory, match=r"in the actor update .*actor\.micro_batch_size \(now 120"):
            step.train(batch, StepTimer())
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)


def test_a_checkpoint_restores_the_gpu_random_state(tmp_path, tiny_policy_path):
    """Dropout and `torch.rand` on CUDA draw from the GPU's own generator: a resumed run draws what the run would
    have drawn next (state.pt holds one state per GPU; on the CPU the check covers torch's CPU generator)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlrm.engine.checkpoint import load_state, save_checkpoint

    policy = AutoModelForCausalLM.from_pretrained(tiny_policy_path).to(DEVICE)
    torch.manual_seed(7)
    torch.rand(5, device=DEVICE)  # the generator has moved on from its seed
    tokenizer = AutoTokenizer.from_pretrained(tiny_policy_path)
    ckpt = save_checkpoint(tmp_path, 1, policy, tokenizer, {"actor": {}, "loader": {}}, keep=1)
    expected = torch.rand(4, device=DEVICE).tolist()
    torch.manual_seed(8)
    load_state(ckpt)
    assert torch.rand(4, device=DEVICE).tolist() == expected
