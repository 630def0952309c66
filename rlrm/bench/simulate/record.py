"""What a simulated run leaves behind: one metrics row per step and the spans of a trace.json,
shaped like a real run's so `rlrm report` and rlrm/bench/results.py read them unchanged.

    rec = Recorder(spec, mode)
    rec.begin_step(k, t); rec.wait("gen", t0, t1); rec.busy("update_actor", t1, t2); rec.end_step(k, t3)
    rows, spans = rec.finish(engine, batches)

Idle ratios follow rlrm/engine/metrics: 1 - busy / wall per step window, the trainer busy in its
phases (adv, old/ref log-probs, mini-batches, weight sync), an engine busy while it decodes (a
fleet's idle ratio is the mean over its engines).
"""

from __future__ import annotations

import numpy as np

from rlrm.bench.simulate.batches import group_rows
from rlrm.engine.metrics.timing import Span

TRAINER_PHASES = ("adv", "old_log_prob", "ref", "update_actor", "update_weights")


class Recorder:
    def __init__(self, spec, mode: str):
        self.spec, self.mode = spec, mode
        self.rows: list[dict] = []
        self.spans: list[Span] = []
        self.detail = spec.output.trace_detail_steps
        self._row: dict = {}

    def _add(self, key: str, seconds: float) -> None:
        self._row[key] = self._row.get(key, 0.0) + seconds

    def begin_step(self, k: int, t: float) -> None:
        self._row = {"step": k, "_start": t}

    def wait(self, kind: str, start: float, end: float) -> None:
        """The trainer waited for generation ("gen") or rewards ("reward")."""
        if end > start:
            self._add(f"timing_s/{kind}", end - start)
            self.spans.append(Span(f"{kind}_wait", kind, start, end))

    def busy(self, name: str, start: float, end: float) -> None:
        """The trainer worked on phase `name`."""
        self._add(f"timing_s/{name}", end - start)
        last = self.spans[-1] if self.spans else None
        if last is not None and last.lane == "trainer" and last.name == name and abs(last.end_s - start) < 1e-9:
            self.spans[-1] = Span("trainer", name, last.start_s, end)  # one span per phase, as StepTimer records it
        else:
            self.spans.append(Span("trainer", name, start, end))

    def minibatch(self, k: int, start: float, end: float, index: int, epoch: int, samples: int) -> None:
        if k <= self.detail:
            self.spans.append(
                Span("minibatch", f"mini-batch {index}", start, end, {"epoch": epoch, "samples": samples})
            )

    def trained(self, k: int, chosen: list) -> None:
        """The samples step k trained on: (batch, groups) pairs; counts, tokens, staleness, failures."""
        n = self.spec.workload.samples_per_prompt
        rows = [(b, group_rows(g, n)) for b, g in chosen]
        resp = np.concatenate([b.resp_len[i] for b, i in rows]) if rows else np.zeros(0)
        prompt = np.concatenate([b.prompt_len[i] for b, i in rows]) if rows else np.zeros(0)
        lag = (k - 1) - np.concatenate([b.version[i] for b, i in rows]) if rows else np.zeros(1)
        self._row.update(
            {
                "batch/num_samples": int(resp.size),
                "perf/total_num_tokens": int(resp.sum() + prompt.sum()),
                "perf/response_tokens": int(resp.sum()),
                "response_length/mean": float(resp.mean()) if resp.size else 0.0,
                "response_length/max": int(resp.max(initial=0)),
                "response_length/min": int(resp.min(initial=0)),
                "response_length/clip_ratio": float((resp >= self.spec.workload.max_response_tokens).mean())
                if resp.size
                else 0.0,
                "prompt_length/mean": float(prompt.mean()) if prompt.size else 0.0,
                "async/staleness_mean": float(lag.mean()) if lag.size else 0.0,
                "async/staleness_max": int(lag.max(initial=0)),
                "reward/retries": sum(int(np.maximum(b.attempts[i] - 1, 0).sum()) for b, i in rows),
                "reward/cache_hits": sum(int(b.cached[i].sum()) for b, i in rows),
                "reward/cache_misses": sum(int((~b.cached[i]).sum()) for b, i in rows),
            }
        )

    def scored(self, samples: int, failed: int) -> None:
        """The samples scored for this step, before any group is dropped, and how many failed after their retries
        (as the reward loop counts them: `reward/samples`, `reward/failures`)."""
        self._row.update(
            {
                "reward/samples": samples,
                "reward/failures": failed,
                "reward/defaulted": failed if self.spec.reward.on_failure == "default" else 0,
            }
        )

    def dropped(self, groups: int) -> None:
        self._row["reward/dropped_groups"] = groups

    def end_step(self, k: int, t: float) -> None:
        row = self._row
        wall = t - row["_start"]
        busy = sum(row.get(f"timing_s/{p}", 0.0) for p in TRAINER_PHASES)
        row.update(
            {
                "perf/time_per_step": wall,
                "timing_s/step": wall,
                "perf/wall_s": t,
                "perf/throughput": row.get("perf/total_num_tokens", 0) / wall if wall > 0 else 0.0,
                "perf/samples_per_s": row.get("batch/num_samples", 0) / wall if wall > 0 else 0.0,
                "idle/trainer": max(0.0, 1.0 - busy / wall) if wall > 0 else 0.0,
                "idle/reward_wait": row.get("timing_s/reward", 0.0) / wall if wall > 0 else 0.0,
            }
        )
        self.rows.append(row)

    def finish(self, engine, batches: dict, draws) -> tuple[list[dict], list[Span]]:
        """Rows with idle/rollout and the reward counters; spans with requests, reward calls and decoding."""
        replica, start, end = engine.intervals()
        windows = np.array([[r["_start"], r["perf/wall_s"]] for r in self.rows]).reshape(-1, 2)
        busy = _covered(start, end, windows) / engine.replicas
        for row, b in zip(self.rows, busy):
            wall = row["perf/time_per_step"]
            row["idle/rollout"] = max(0.0, 1.0 - b / wall) if wall > 0 else 0.0
            k = row["step"]
            row["reward/timeouts"] = int(draws.timeouts[k - 1])
            row["reward/injected_failures"] = int(draws.injected_failures[k - 1])
            row["reward/injected_latency_mean"] = float(draws.latency_mean[k - 1])
            row.setdefault("reward/dropped_groups", 0)
            row.pop("_start")
        spans = list(self.spans)
        horizon = (
            self.rows[min(self.detail, len(self.rows)) - 1]["perf/wall_s"] if self.rows and self.detail else -np.inf
        )
        many = engine.replicas > 4  # a fleet: decode stretches of the detailed steps only
        for r, s, e in zip(replica.tolist(), start.tolist(), end.tolist()):
            if not many or s < horizon:
                spans.append(Span("rollout", f"decode #{r}" if engine.replicas > 1 else "decode", s, e))
        for k in range(1, self.detail + 1):
            if k in batches:
                spans += _sample_spans(batches[k], self.spec)
        return self.rows, spans


def _sample_spans(batch, spec) -> list[Span]:
    """generate and reward spans of (an even subset of) the batch's samples."""
    times = batch.times_final
    n, total = batch.n, len(batch.resp_len)
    pick = np.unique(np.linspace(0, total - 1, min(total, spec.output.trace_max_samples)).astype(int))
    arrive = batch.launched_s + spec.rollout.submit_s
    base = spec.reward.base_s
    out = []
    for i in pick.tolist():
        group = i // n
        out.append(Span("generate", "generate", arrive, float(batch.gen_done[i]), {"batch": batch.k, "group": group}))
        start, done = float(times["reward_start"][i]), float(times["reward_done"][i])
        args = {
            "batch": batch.k,
            "group": group,
            "sample": i,
            "injected_latency_s": max(0.0, float(batch.reward_s[i]) - base),
        }
        if batch.cached[i]:
            args["cached"] = True  # as the trainer's trace marks a sample the reward cache answered
        out.append(Span("reward", "reward", start, done, args))
    return out


def _covered(start: np.ndarray, end: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """Per window [a, b], the summed length of the intervals [start, end] inside it.

    F(t) = sum over intervals of their length before t = sum_{s < t} (t - s) - sum_{e < t} (t - e);
    a window covers F(b) - F(a). Overlapping intervals count twice (an engine's are disjoint).
    """
    if len(start) == 0 or len(windows) == 0:
        return np.zeros(len(windows))
    s, e = np.sort(start), np.sort(end)
    cs, ce = np.concatenate([[0.0], np.cumsum(s)]), np.concatenate([[0.0], np.cumsum(e)])

    def before(t):
        i, j = np.searchsorted(s, t), np.searchsorted(e, t)
        return (t * i - cs[i]) - (t * j - ce[j])

    return before(windows[:, 1]) - before(windows[:, 0])
