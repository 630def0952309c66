"""The in-trainer FSDP DisRM (`reward.disrm.scorer: legacy`): verl's legacy FSDP reward-model worker, rebuilt on FSDP2.

    batching.py  micro-batches by count or token budget, the token-level reward tensor (pure)
    rank.py      one rank: the reward model as a token scorer, sharded with FSDP2 (imports torch)
    workers.py   the worker group: `world_size` ranks, owned processes, a batch split as verl split it
    disrm.py     the per-sample reward function training uses with `reward.disrm.scorer: legacy`

`rlrm parity disrm` compares it with the served DisRM of the reward loop.
"""
