"""reward.inject.latency specs: the grammar, the statistics of the draws, trace files, and the profile section."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest

from rlrm.config.latency import GRAMMAR, LatencyDist, parse_latency
from rlrm.config.loader import load_profile
from rlrm.errors import ConfigError
from rlrm.stats import quantile

N = 20_000


def draws(spec, n=N, seed=0):
    dist, rng = parse_latency(spec), random.Random(seed)
    return sorted(dist.sample(rng) for _ in range(n))


# ---- grammar


@pytest.mark.parametrize(
    ("spec", "kind", "params", "scale"),
    [
        ("none", "none", (), 1.0),
        ("0", "none", (), 1.0),
        ("fixed:0.5", "fixed", (0.5,), 1.0),
        ("uniform:1:40 x0.0123", "uniform", (1.0, 40.0), 0.0123),
        ("normal:0.1:0.2", "normal", (0.1, 0.2), 1.0),
        ("lognormal:-1:0.5", "lognormal", (-1.0, 0.5), 1.0),  # a negative MU is a median below 1 s
        ("pareto:0.1:1.5", "pareto", (0.1, 1.5), 1.0),
        (" FIXED:2 ", "fixed", (2.0,), 1.0),
    ],
)
def test_accepted_specs_and_canonical_form(spec, kind, params, scale):
    dist = parse_latency(spec)
    assert (dist.kind, dist.params, dist.scale) == (kind, params, scale)
    assert parse_latency(dist.spec) == dist and str(dist) == dist.spec


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("bogus", "unknown kind 'bogus'"),
        ("", "unknown kind"),
        ("1.5", "write fixed:S"),
        ("fixed", "fixed takes 1 number, got 0"),
        ("fixed:1:2", "fixed takes 1 number, got 2"),
        ("normal:1", "normal takes 2 numbers"),
        ("fixed:abc", "'abc' is not a number"),
        ("fixed:-1", "S must be >= 0"),
        ("fixed:nan", "not a finite number"),
        ("uniform:inf:inf", "not a finite number"),
        ("uniform:2:1", "0 <= A <= B"),
        ("uniform:-1:1", "0 <= A <= B"),
        ("normal:-1:1", "MU and SIGMA must be >= 0"),
        ("normal:1:-1", "MU and SIGMA must be >= 0"),
        ("lognormal:0:-1", "SIGMA must be >= 0"),
        ("pareto:1:0", "ALPHA > 0"),
        ("pareto:-1:2", "SCALE >= 0"),
        ("fixed:1 x-2", "factor x-2 must be >= 0"),
        ("trace:", "trace needs a file"),
    ],
)
def test_rejected_specs_quote_the_spec_and_list_the_grammar(spec, why):
    with pytest.raises(ValueError) as info:
        parse_latency(spec)
    message = str(info.value)
    assert why in message and repr(spec) in message and GRAMMAR in message and "\n" not in message


def test_non_string_spec_is_rejected():
    with pytest.raises(ValueError, match="expected a string"):
        parse_latency(0.5)


# ---- statistics of 20k seeded draws


def test_fixed_is_exact():
    assert set(draws("fixed:0.25", n=100)) == {0.25}
    assert parse_latency("fixed:0.25").mean() == 0.25
    assert set(draws("none", n=10)) == {0.0} and parse_latency("0").is_zero


def test_uniform_mean_and_quantiles():
    x = draws("uniform:1:3")
    # U(1, 3): mean 2, q10 1.2, q50 2, q90 2.8; standard error of the mean 0.58/sqrt(20k) = 0.004
    assert statistics.fmean(x) == pytest.approx(2.0, abs=0.02)
    assert [quantile(x, q) for q in (0.1, 0.5, 0.9)] == pytest.approx([1.2, 2.0, 2.8], abs=0.03)
    assert 1.0 <= x[0] and x[-1] <= 3.0
    assert parse_latency("uniform:1:3").mean() == 2.0


def test_normal_is_clipped_at_zero():
    x = draws("normal:0.1:0.2")
    assert x[0] == 0.0  # never negative: the mass below 0 lands on 0
    # P(X <= 0) = Phi(-0.5) = 0.3085
    assert sum(v == 0.0 for v in x) / N == pytest.approx(0.3085, abs=0.015)
    # E[max(0, X)] = mu Phi(mu/s) + s phi(mu/s) = 0.1 * 0.69146 + 0.2 * 0.35207 = 0.13956
    assert parse_latency("normal:0.1:0.2").mean() == pytest.approx(0.13956, abs=1e-5)
    assert statistics.fmean(x) == pytest.approx(0.13956, abs=0.004)


def test_lognormal_median_is_exp_mu():
    x = draws("lognormal:-1:0.5")
    assert quantile(x, 0.5) == pytest.approx(math.exp(-1), rel=0.03)  # 0.3679
    # mean exp(mu + sigma^2 / 2) = exp(-0.875) = 0.4169
    assert parse_latency("lognormal:-1:0.5").mean() == pytest.approx(0.41686, abs=1e-4)
    assert statistics.fmean(x) == pytest.approx(0.41686, rel=0.03)


def test_pareto_minimum_median_and_mean():
    x = draws("pareto:0.1:1.5")
    assert x[0] >= 0.1
    # U^(-1/alpha) has median 2^(1/alpha): 0.1 * 2^(2/3) = 0.15874
    assert quantile(x, 0.5) == pytest.approx(0.15874, rel=0.03)
    assert quantile(x, 0.99) > 10 * 0.1  # the heavy tail: 0.1 * 100^(2/3) = 2.15
    assert parse_latency("pareto:0.1:1.5").mean() == pytest.approx(0.3)  # scale * alpha / (alpha - 1)
    with pytest.raises(ValueError, match="infinite mean"):
        parse_latency("pareto:0.1:1").mean()


def test_scaled_multiplies_every_draw():
    base = parse_latency("uniform:1:40")
    small = base.scaled(0.0123)
    assert small.spec == "uniform:1:40 x0.0123" and parse_latency(small.spec) == small
    assert small.mean() == pytest.approx(20.5 * 0.0123)
    assert small.sample(random.Random(7)) == pytest.approx(0.0123 * base.sample(random.Random(7)))
    assert parse_latency("fixed:2 x0.5").scaled(3).sample(random.Random(0)) == pytest.approx(3.0)
    assert base.scaled(0).is_zero and base.scaled(0).mean() == 0.0
    with pytest.raises(ValueError, match=">= 0"):
        base.scaled(-1)


# ---- traces


def test_trace_from_csv_named_and_default_column(tmp_path):
    path = tmp_path / "lat.csv"
    path.write_text("host,latency_s,tokens\na,0.5,10\nb,1.5,20\n\nc,,30\nd,1.0,40\n")
    default = parse_latency(f"trace:{path}")  # host is not numeric: latency_s is the first numeric column
    assert default.values == (0.5, 1.5, 1.0) and default.mean() == pytest.approx(1.0)  # blank cells skipped
    named = parse_latency(f"trace:{path}:tokens")
    assert named.values == (10.0, 20.0, 30.0, 40.0) and named.spec == f"trace:{path}:tokens"
    assert set(draws(named.spec, n=200)) == {10.0, 20.0, 30.0, 40.0}  # resampled with replacement
    headerless = tmp_path / "plain.csv"
    headerless.write_text("0.1\n0.2\n0.3\n")
    assert parse_latency(f"trace:{headerless}").values == (0.1, 0.2, 0.3)


@pytest.mark.parametrize(
    ("data", "column"),
    [
        ([0.5, 1.5, 1.0], None),
        ([{"id": "a", "s": 0.5}, {"id": "b", "s": 1.5}, {"id": "c", "s": 1.0}], None),
        ([{"id": "a", "s": 0.5}, {"id": "b", "s": 1.5}, {"id": "c", "s": 1.0}], "s"),
        ({"names": ["a", "b", "c"], "s": [0.5, 1.5, 1.0]}, None),
        ({"other": [9, 9], "s": [0.5, 1.5, 1.0]}, "s"),
    ],
)
def test_trace_from_the_three_json_shapes(tmp_path, data, column):
    path = tmp_path / "lat.json"
    path.write_text(json.dumps(data))
    dist = parse_latency(f"trace:{path}" + (f":{column}" if column else ""))
    assert dist.values == (0.5, 1.5, 1.0) and dist.mean() == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        ("missing.csv", None, "does not exist"),
        ("empty.csv", "", "holds no latencies"),
        ("header_only.csv", "latency_s\n", "holds no latencies"),
        ("words.csv", "latency_s\nfast\nslow\n", "no column of numbers"),
        ("negative.csv", "latency_s\n0.5\n-1\n", "holds -1.0"),
        ("nan.json", "[0.5, NaN]", "holds nan"),
        ("empty.json", "[]", "holds no latencies"),
        ("bad.json", "{not json", "not valid JSON"),
        ("scalar.json", "3", "must hold a list"),
        ("mixed.json", '[1, "x"]', "non-number 'x'"),
    ],
)
def test_unusable_trace_files_are_rejected_with_their_path(tmp_path, name, text, needle):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError) as info:
        parse_latency(f"trace:{path}")
    assert needle in str(info.value) and str(path) in str(info.value)


def test_trace_column_errors(tmp_path):
    path = tmp_path / "lat.csv"
    path.write_text("host,latency_s\na,0.5\n")
    with pytest.raises(ValueError, match="no column 'latncy_s' .*columns: host, latency_s"):
        parse_latency(f"trace:{path}:latncy_s")
    with pytest.raises(ValueError, match="column 'host' holds a non-number 'a'"):
        parse_latency(f"trace:{path}:host")
    plain = tmp_path / "lat.json"
    plain.write_text("[1, 2]")
    with pytest.raises(ValueError, match="plain list"):
        parse_latency(f"trace:{plain}:s")


# ---- the profile section


def test_bad_profile_values_name_the_key_in_one_line():
    with pytest.raises(ConfigError) as info:
        load_profile("tiny-rule", ["reward.inject.latency=bogus"])
    message = str(info.value)
    assert "reward.inject.latency" in message and "uniform:A:B" in message and "\n" not in message
    with pytest.raises(ConfigError, match=r"reward\.inject\.fail_rate: .*probability in \[0, 1\]"):
        load_profile("tiny-rule", ["reward.inject.fail_rate=1.5"])
    with pytest.raises(ConfigError, match=r"reward\.inject\.scale"):
        load_profile("tiny-rule", ["reward.inject.scale=-1"])
    with pytest.raises(ConfigError, match="did you mean 'reward.inject.latency'"):
        load_profile("tiny-rule", ["reward.inject.latncy=fixed:1"])


def test_profile_with_a_trace(tmp_path):
    trace = tmp_path / "lat.csv"
    trace.write_text("latency_s\n1\n3\n")
    profile = tmp_path / "p.yaml"
    profile.write_text(f"extends: tiny-rule\nreward:\n  inject:\n    latency: trace:{trace}\n    scale: 0.5\n")
    inject_cfg = load_profile(str(profile)).reward.inject
    assert inject_cfg.active and parse_latency(inject_cfg.latency).scaled(inject_cfg.scale).mean() == 1.0
    assert not load_profile("tiny-rule", ["reward.inject.latency=0"]).reward.inject.active
    with pytest.raises(ConfigError, match=f"reward.inject.latency: .*{trace.name}.*holds no latencies"):
        trace.write_text("latency_s\n")
        load_profile(str(profile))


def test_latency_dist_is_a_plain_value():
    dist = parse_latency("pareto:0.1:1.5 x2")
    assert isinstance(dist, LatencyDist) and hash(dist) == hash(parse_latency(dist.spec))
