"""An FSDP2-wrapped policy runs its LM head whole, whatever `actor.logits_chunk_tokens` says.

The chunked head (rlrm/engine/actor/logprobs.py) calls the decoder and the head apart; on an FSDP2 model that
would skip the root module's forward, which gathers the root's shards (embeddings, head) and arms their gradient
reduction. The ranks must take the whole path. Run in a subprocess: a process group of one rank (gloo), the
model sharded as rlrm's ranks shard it, log-probs with the chunks forced on against the unsharded model's.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

SCRIPT = textwrap.dedent(
    """
    import copy, sys
    import torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from rlrm.engine.actor.actor import Actor  # noqa: F401 (the actor's imports, as on a rank)
    from rlrm.engine.actor.batch import collate
    from rlrm.engine.actor.logprobs import _decoder_and_head, response_log_probs
    from rlrm.engine.actor.rank import shard_model
    from rlrm.inference.base import Completion

    dist.init_process_group("gloo", store=dist.FileStore(sys.argv[1], 1), rank=0, world_size=1)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    plain = Qwen2ForCausalLM(config)
    sharded = copy.deepcopy(plain)
    shard_model(sharded, init_device_mesh("cpu", (1,)), "cpu", "float32")
    assert _decoder_and_head(plain) is not None
    assert _decoder_and_head(sharded) is None, "an FSDP2 model must run its head whole"
    specs = [([5, 9, 12], [4, 8, 1]), ([5, 9, 12], [4, 1, 7]), ([7, 3], [1, 2, 3])]
    batch = collate([Completion(p, r, [-1.0] * len(r), "length") for p, r in specs], pad_token_id=0)
    lp, _ = response_log_probs(sharded, batch, 1.0, 64, chunk_tokens=2, chunk_above_bytes=0)
    (lp * batch.response_mask).sum().backward()
    want, _ = response_log_probs(plain, batch, 1.0, 64)
    assert torch.allclose(lp, want, atol=1e-5), (lp, want)
    assert all(p.grad is not None for p in sharded.parameters())
    dist.destroy_process_group()
    print("ok")
    """
)


def test_an_fsdp2_wrapped_policy_runs_its_head_whole(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "store")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
