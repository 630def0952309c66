"""`rlrm bench simulate`: the scheduling modes at cluster scale, predicted from measured phase costs.

A discrete-event simulator of one training run under each mode, following the real schedulers'
rules (rlrm/engine/scheduling), driven by cost models that are either fitted to a run folder
(`calibrate.py`) or written in a YAML cluster spec (`spec.py`, examples/cluster-*.yaml):

    spec = load_spec("examples/cluster-64x32.yaml", overrides=["rollout.replicas=128"])
    result = simulate(spec, "one-step-off")       # per-step rows, trace spans, busy intervals

Files: spec (the schema), draws (vectorised per-sample draws), engines (generation cost models),
rewards (the reward loop's timing), kernel (the heapq event loop), modes (rollouter and trainer
processes), record (step rows and trace spans), run (modes x sweep points -> output folder),
calibrate and validate (fit from a run folder, compare with a benchmark).
"""
