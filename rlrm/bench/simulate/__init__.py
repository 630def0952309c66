"""`rlrm bench simulate`: the scheduling modes at cluster scale, predicted from measured phase costs.

A discrete-event simulator of one training run under each mode, following the real schedulers'
rules (rlrm/engine/scheduling), driven by cost models that are either fitted to a run folder
(calibrate.py) or written in a YAML cluster spec (spec.py, examples/cluster-gpu.yaml):

    spec = load_spec("examples/cluster-gpu.yaml", overrides=["rollout.replicas=128"])
    run = simulate(spec, "one-step-off", draw_workload(spec))     # per-step rows and trace spans
    run_simulation(spec, out=Path("sim/gpu"))                      # every mode, written like a benchmark

Files: spec (the input schema), draws (every sample's lengths and reward time, drawn once),
engines and static (generation cost models), batches (a launched batch; the reward loop's
queue), kernel (the heapq event loop), modes (the rollouter and trainer processes: the rules),
simulation (one run of one mode), record (metrics rows, idle ratios, trace spans), run (modes x
sweep points -> an output folder), fit and calibrate (costs from a run folder), check_vs_bench
(predicted vs a measured benchmark), plan (what the CLI was asked for).
"""
