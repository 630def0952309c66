"""The benchmark's spread (median, interval, within noise), its pairing by repeat, and each mode's bound.

The bounds are checked against the simulator: with no overhead anywhere, a simulated mode's step time
never beats its bound, and reaches it (within 3%) in the regimes where the bound's argument is tight.
"""

from __future__ import annotations

import math

import pytest

from rlrm.bench.limits import BatchLatency, Phases, Shape, baseline_phases, batch_latency, mode_bound, of_limit
from rlrm.bench.results import compare, mode_stats
from rlrm.config.latency import parse_latency
from rlrm.stats import spread, within_noise


def test_spread_method_follows_the_number_of_repeats():
    assert spread([1.5]).method == "unknown" and math.isnan(spread([1.5]).lo)
    few = spread([1.2, 1.0, 1.4])
    assert (few.median, few.lo, few.hi, few.method) == (1.2, 1.0, 1.4, "min-max")
    many = spread([1.71, 1.80, 1.77, 1.83, 1.75, 1.79, 1.74])
    assert many.method == "bootstrap95"
    assert many.lo <= many.median <= many.hi and 1.71 <= many.lo and many.hi <= 1.83
    assert spread([1.71, 1.80, 1.77, 1.83, 1.75]) == spread([1.71, 1.80, 1.77, 1.83, 1.75])  # seeded
    assert spread([float("nan"), 2.0]).method == "unknown"  # non-finite values are left out, not averaged


def test_within_noise_when_the_interval_holds_one():
    assert within_noise(spread([0.95, 1.03, 1.01]))
    assert not within_noise(spread([1.05, 1.10, 1.08]))
    assert not within_noise(spread([1.3]))  # one repeat: no interval, so no claim either way


def _row(mode, repeat, latency, tps):
    return {"mode": mode, "repeat": repeat, "latency": latency, "tokens_per_s": tps, "idle_trainer": 0.5}


def test_each_run_is_compared_with_sync_of_its_own_repeat():
    # repeat 1 ran on a machine twice as slow: paired ratios cancel that drift, pooled means would not
    rows = [
        _row("sync", 0, "none", 200.0),
        _row("sync", 0, "u", 100.0),
        _row("fully-async", 0, "u", 200.0),
        _row("sync", 1, "none", 100.0),
        _row("sync", 1, "u", 50.0),
        _row("fully-async", 1, "u", 100.0),
    ]
    out = compare(rows)
    assert [r["speedup_vs_sync"] for r in out if r["mode"] == "fully-async"] == [2.0, 2.0]
    assert [r["hiding_efficiency"] for r in out if r["mode"] == "fully-async"] == [1.0, 1.0]
    stats = mode_stats(out, "u")
    assert stats["fully-async"]["speedup_vs_sync"] == 2.0
    assert (stats["fully-async"]["speedup_vs_sync_lo"], stats["fully-async"]["speedup_vs_sync_hi"]) == (2.0, 2.0)
    assert stats["fully-async"]["interval"] == "min-max" and stats["fully-async"]["repeats"] == 2
    assert not stats["fully-async"]["within_noise"] and not stats["sync"]["within_noise"]


def test_a_repeat_without_its_sync_run_falls_back_to_sync_mean():
    rows = [_row("sync", 0, "u", 100.0), _row("sync", 1, "u", 300.0), _row("stream", 2, "u", 400.0)]
    assert compare(rows)[-1]["speedup_vs_sync"] == pytest.approx(2.0)


P = Phases(gen=0.5, reward=0.01, train=1.0, step=1.6)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("sync", 0.5 + 2.0 + 1.0),  # G + L + T
        ("stream", max(0.5 + 1.0, 2.0) + 1.0),  # W + T, W = max(G + l, L)
        ("pipeline", 2.0 + 1.0 * (1 - 3 / 8)),  # M=4 mini-batches, E=2 epochs: 5/8 of T after the last reward
        ("one-step-off", max(0.5, 1.0, (2.0 + 1.0) / 2)),
        ("fully-async", max(0.5, 1.0, (2.0 + 1.0) / 3)),
    ],
)
def test_bounds_as_derived(mode, expected):
    assert mode_bound(mode, P, BatchLatency(mean=1.0, slowest=2.0), Shape(2, 4, 2)) == pytest.approx(expected)


# the same trainer's work, of which old/ref log-probs P = 0.3 s (computed while the rewards arrive) and advantages
# A = 0.1 s (which need the scores): ready to train at V = max(G + P, W) = max(0.8, 2.0) = 2.0
PREPARED = Phases(gen=0.5, reward=0.01, train=1.0, step=1.6, prepare=0.3, adv=0.1)


@pytest.mark.parametrize(
    ("mode", "latency", "expected"),
    [
        ("sync", 2.0, 0.5 + 2.0 + 1.0),  # nothing overlaps: G + L + T
        ("stream", 2.0, 2.0 + 0.7),  # V + T - P
        ("stream", 0.1, 0.5 + 0.3 + 0.7),  # the old/ref passes outlast the rewards: G + P + T - P = G + T
        ("pipeline", 2.0, 2.0 + 0.1 / 4 + 0.6 * (1 - 3 / 8)),  # the last mini-batch's A/M, 5/8 of the update
        ("one-step-off", 2.0, max(0.5, 1.0, (2.0 + 0.7) / 2)),
        ("fully-async", 2.0, max(0.5, 1.0, (2.0 + 1.0) / 3)),  # prepares what it takes once scored: W + T
    ],
)
def test_bounds_let_the_old_and_ref_passes_overlap_the_rewards(mode, latency, expected):
    lat = BatchLatency(mean=latency / 2, slowest=latency)
    assert mode_bound(mode, PREPARED, lat, Shape(2, 4, 2)) == pytest.approx(expected)


def test_batch_latency_of_uniform_is_its_mean_and_expected_max():
    lat = batch_latency(parse_latency("uniform:1:3"), samples=9, draws=2000, seed=1)
    assert lat.mean == pytest.approx(2.0)
    assert lat.slowest == pytest.approx(3 - 2 / 10, abs=0.03)  # E[max of n uniform(a, b)] = b - (b-a)/(n+1)
    assert batch_latency(parse_latency("none"), samples=9) == BatchLatency(0.0, 0.0)


def test_baseline_phases_are_medians_without_the_warm_up_step():
    def row(step, gen, train_part, total):
        return {"step": step, "timing_s/gen": gen, "timing_s/reward": 0.01, "timing_s/update_actor": train_part,
                "timing_s/old_log_prob": 0.1, "timing_s/step": total}  # fmt: skip

    runs = [
        [row(1, 9.0, 9.0, 20.0), row(2, 0.5, 0.9, 1.6), row(3, 0.7, 1.1, 1.9)],
        [row(1, 5.0, 5.0, 11), row(2, 0.6, 1.0, 1.7)],
    ]
    phases = baseline_phases(runs)
    assert phases.gen == pytest.approx(0.6) and phases.train == pytest.approx(1.1)  # the warm-up steps left out
    assert phases.prepare == pytest.approx(0.1) and phases.adv == 0.0  # old_log_prob + ref; no adv timed
    assert baseline_phases([[row(1, 5.0, 5.0, 11.0)]]).gen == 5.0  # a one-step run has nothing else
    with pytest.raises(ValueError):
        baseline_phases([[{"step": 0}]])
    assert math.isnan(of_limit(math.nan, 1.0)) and of_limit(1.0, 2.0) == 0.5


# The simulator with no overhead: generation G = 50 decode iterations of 0.01 s; training T = 32 samples of
# 60 tokens at 1 ms per token. Each case picks the injected latency (fixed, so l = L) where a bound binds.
SIM = [
    "workload.steps=48",
    "workload.prompts_per_step=8",
    "workload.samples_per_prompt=4",
    "workload.mini_batch_prompts=8",
    "workload.response_tokens=fixed:50",
    "workload.prompt_tokens=fixed:10",
    "workload.max_response_tokens=64",
    "workload.max_staleness=2",
    "reward.latency=fixed:1",
    "rollout.iteration_s=0.01",
    "trainer.minibatch_s_per_token=0.001",
]
G, T = 0.5, 32 * 60 * 0.001
# On top of the update: a reference pass P as long as the update (1.92 s), computed while the rewards arrive,
# or advantages A of 1 s, which wait for the scores. E.g. stream, latency 6 s, the reference pass: generated at
# 0.5, reference pass to 2.42, last reward at 6.5, update to 8.42 = max(G + P, W) + T (the bound W + T + P,
# 10.34 s, counted the reference pass after the rewards); with the advantages: 6.5 + 1 + 1.92 = 9.42.
EXTRA = {
    "update": ([], Phases(G, 0.0, T, G + T)),
    "ref": (["workload.use_ref=true", "trainer.ref_s_per_token=0.001"], Phases(G, 0.0, 2 * T, G + 2 * T, prepare=T)),
    "adv": (["trainer.adv_s=1.0"], Phases(G, 0.0, T + 1.0, G + T + 1.0, adv=1.0)),
}


@pytest.mark.parametrize("extra", list(EXTRA))
@pytest.mark.parametrize("latency", [0.5, 6.0])
@pytest.mark.parametrize("mode", ["sync", "stream", "pipeline", "one-step-off", "fully-async"])
def test_a_simulated_mode_without_overhead_reaches_its_bound(mode, latency, extra):
    from rlrm.bench.simulate.run import run_simulation
    from rlrm.bench.simulate.spec import load_spec

    sets, phases = EXTRA[extra]
    spec = load_spec(overrides=[*SIM, *sets, f"reward.latency_scale={latency}", f"modes=[{mode}]"])
    rows = run_simulation(spec, None, repeats=1, write=False).rows
    base = next(r for r in rows if r["latency"] == "none")
    assert base["step_time_p50"] == pytest.approx(phases.step, rel=1e-6)  # the costs are what the comment says
    simulated = next(r for r in rows if r["latency"] != "none")["step_time_mean"]
    bound = mode_bound(mode, phases, BatchLatency(latency, latency), Shape(2))
    # never beaten, but for the pipeline fill: the first step's batches all launched at time 0, so the steps after
    # it come faster than the steady state for a while (one-step-off: 1.2% over 47 steps, by the recurrence
    # version(k) = version(k-2) + W + T)
    assert simulated >= bound * (1 - 0.02)
    assert simulated == pytest.approx(bound, rel=0.03)  # and, without overhead, reached


def test_the_cores_term_is_the_cpu_work_of_generation_and_training_over_the_cores():
    def row(step, cpu=True):
        r = {"step": step, "timing_s/gen": 0.5, "timing_s/update_actor": 1.0, "timing_s/old_log_prob": 0.1,
             "timing_s/step": 1.7}  # fmt: skip
        if cpu:  # generation kept 1.6 cores busy, the update 1.5, of 2
            r.update({"cpu_s/gen": 0.8, "cpu_s/update_actor": 1.5, "perf/cpu_cores": 2})
        return r

    assert baseline_phases([[row(1), row(2)]]).cores == pytest.approx((0.8 + 1.1 * 1.5) / 2)
    assert baseline_phases([[row(1), row(2, cpu=False)]]).cores == 0.0  # unknown: no cores term
    shared = Phases(gen=0.5, reward=0.0, train=1.1, step=1.7, cores=1.225)
    no_latency = BatchLatency(0.0, 0.0)
    assert mode_bound("fully-async", shared, no_latency, Shape(2)) == pytest.approx(1.225)  # the cores bind
    assert mode_bound("one-step-off", shared, no_latency, Shape(2)) == pytest.approx(1.225)
    assert mode_bound("fully-async", Phases(0.5, 0.0, 1.1, 1.7), no_latency, Shape(2)) == pytest.approx(1.1)


@pytest.mark.parametrize("slowdown", [1.5, 2.0])
def test_a_simulated_colocated_fully_async_reaches_the_cores_bound(slowdown):
    # generation and training on one device: while both compute each runs `slowdown` times slower, as two phases
    # that each kept slowdown/2 of the cores busy alone would; with G = T the cores bound is what binds
    from rlrm.bench.simulate.run import run_simulation
    from rlrm.bench.simulate.spec import load_spec

    sets = [*SIM, "workload.response_tokens=fixed:64", "workload.max_response_tokens=64", "rollout.batching=static"]
    sets += ["rollout.iteration_s=0.037", f"rollout.colocated_slowdown={slowdown}", "reward.latency_scale=0.01"]
    sets += ["workload.steps=96"]  # the fill (batches generated at full speed before training starts) spread thinner
    spec = load_spec(overrides=[*sets, "modes=[fully-async]"])
    rows = run_simulation(spec, None, repeats=1, write=False).rows
    gen, train = 64 * 0.037, 32 * (10 + 64) * 0.001  # both 2.368 s alone (training counts the prompt's tokens)
    cores = slowdown * (gen + train) / 2
    bound = mode_bound("fully-async", Phases(gen, 0.0, train, gen + train, cores), BatchLatency(0.01, 0.01), Shape(2))
    assert bound == pytest.approx(cores)
    simulated = next(r for r in rows if r["latency"] != "none")["step_time_mean"]
    assert simulated >= bound * (1 - 0.02)
    assert simulated == pytest.approx(bound, rel=0.03)
