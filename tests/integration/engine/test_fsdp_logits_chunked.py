"""FSDP2 ranks run the LM head in chunks (`actor.logits_chunk_tokens`) with the whole head's numbers.

The chunked head (rlrm/engine/actor/logprobs.py) takes the hidden states from the model's own forward, its head
passing them through, so the root module's forward gathers the root's shards (embeddings, norm, head) and arms
their gradient reduction; the chunks then use the gathered head, which FSDP2 keeps to the end of the backward
pass. Two gloo ranks, each in its own process, the model sharded as rlrm's ranks shard it (resharded after each
layer's forward, the root kept gathered) or with its root resharded too, the same batch on both: log-probs and every parameter's reduced gradient against one unsharded
model running its head whole, untied and tied (Qwen2.5-0.5B ties its head to the embeddings). Under bf16 mixed
precision (the ranks' policy on a GPU, run here on gloo) the chunks add the gathered bf16 head's gradient up in
float32, as the whole head's one product does.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

SCRIPT = textwrap.dedent(
    """
    import copy, sys
    import torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from rlrm.engine.actor.actor import Actor  # noqa: F401 (the actor's imports, as on a rank)
    from rlrm.engine.actor.batch import collate
    from rlrm.engine.actor.logprobs import response_log_probs
    from rlrm.engine.actor.rank import shard_model
    from rlrm.inference.base import Completion

    store, rank, world, tied, root = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "tied", sys.argv[5]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank, world_size=world)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    plain = Qwen2ForCausalLM(config)
    sharded = copy.deepcopy(plain)
    mesh = init_device_mesh("cpu", (world,))
    if root == "rlrm":  # as rlrm's ranks shard it: the root kept gathered from its forward to its backward
        shard_model(sharded, mesh, "cpu", "float32")
    else:  # a root resharded after its forward, as one sharded by hand may be: the chunks gather it again
        from torch.distributed.fsdp import fully_shard
        for layer in sharded.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(sharded, mesh=mesh, reshard_after_forward=True)
    calls = []
    sharded.get_output_embeddings().register_forward_hook(lambda *_: calls.append(1))
    # two groups sharing a prompt (the two-pass path) and one alone; 9 response positions in chunks of 2
    specs = [([5, 9, 12], [4, 8, 1]), ([5, 9, 12], [4, 1, 7]), ([7, 3], [1, 2, 3])]
    batch = collate([Completion(p, r, [-1.0] * len(r), "length") for p, r in specs], pad_token_id=0)
    lp, ent = response_log_probs(sharded, batch, 0.7, 64, with_entropy=True, chunk_tokens=2, chunk_above_bytes=0)
    ((lp - 0.1 * ent) * batch.response_mask).sum().backward()
    assert len(calls) > 2, f"the head ran {len(calls)} times: not in chunks"
    want, want_ent = response_log_probs(plain, batch, 0.7, 64, with_entropy=True)
    ((want - 0.1 * want_ent) * batch.response_mask).sum().backward()
    assert torch.allclose(lp, want, atol=1e-5), (lp, want)
    assert torch.allclose(ent, want_ent, atol=1e-5), (ent, want_ent)
    grads = dict(plain.named_parameters())
    for name, p in sharded.named_parameters():
        assert p.grad is not None, f"{name}: no gradient"
        full = p.grad.full_tensor()  # the mean over the ranks, each of which ran the same batch
        assert torch.allclose(full, grads[name].grad, atol=1e-5), (name, (full - grads[name].grad).abs().max())
    dist.barrier()  # neither rank tears down its connections while the other still uses them (gloo aborts then)
    dist.destroy_process_group()
    print("ok")
    """
)


MIXED = textwrap.dedent(
    """
    import copy, sys
    import torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from rlrm.engine.actor.actor import Actor  # noqa: F401 (the actor's imports, as on a rank)
    from rlrm.engine.actor.batch import collate
    from rlrm.engine.actor.logprobs import response_log_probs
    from rlrm.engine.actor.rank import shard_model
    from rlrm.inference.base import Completion

    store, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank, world_size=world)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=257, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    plain = Qwen2ForCausalLM(config)
    draw = torch.Generator().manual_seed(1)
    responses = [torch.randint(1, 257, (64,), generator=draw).tolist() for _ in range(8)]
    batch = collate([Completion([5, 9, 12], r, [-1.0] * 64, "length") for r in responses], pad_token_id=0)

    def head_gradient(model, chunk):
        lp, _ = response_log_probs(model, batch, 1.0, 64, chunk_tokens=chunk, chunk_above_bytes=0)
        (lp * batch.response_mask).sum().backward()
        grad = model.lm_head.weight.grad
        return (grad.full_tensor() if hasattr(grad, "full_tensor") else grad).float()

    exact = head_gradient(plain, 0)
    error = {}
    for chunk in (0, 4):  # whole, then 128 chunks of 4 positions
        sharded = copy.deepcopy(plain)
        sharded.zero_grad(set_to_none=True)
        shard_model(sharded, init_device_mesh("cpu", (world,)), "cuda", "bfloat16")  # the policy the GPU gets
        error[chunk] = ((head_gradient(sharded, chunk) - exact).norm() / exact.norm()).item()
    # adding the bf16 gradient up chunk by chunk: 1.9x the whole head's error (0.0116 against 0.0060; with the
    # float32 copy 0.0059)
    assert error[4] <= 1.2 * error[0], error
    dist.barrier()  # neither rank tears down its connections while the other still uses them (gloo aborts then)
    dist.destroy_process_group()
    print("ok")
    """
)


@pytest.mark.parametrize("head", ["untied", "tied", "tied-root-resharded", "bf16-mixed"])
def test_fsdp2_ranks_chunk_the_head_with_the_whole_heads_numbers(tmp_path, head):
    store = str(tmp_path / "store")
    args = {"untied": ["untied", "rlrm"], "tied": ["tied", "rlrm"], "tied-root-resharded": ["tied", "resharded"]}
    script, args = (MIXED, []) if head == "bf16-mixed" else (SCRIPT, args[head])
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", script, store, str(rank), "2", *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    try:
        outs = [rank.communicate(timeout=120) for rank in ranks]
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
    for rank, (out, err) in zip(ranks, outs):
        assert rank.returncode == 0 and out.strip().endswith("ok"), err[-3000:]
