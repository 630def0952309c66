"""Every in-process path on a stand-in GPU (tests/fixtures/stand_in_gpu.py), on machines without one.

The first CUDA step of every training path once crashed on a tensor made on the CPU (issue 32), unseen by a test
suite that only ever ran on the CPU. A GPU is lent to few sessions, for minutes; the stand-in device refuses
what CUDA refuses, so the class of fault fails here, in the default tier, on every change. A path in float32 runs on
the CPU and on the stand-in with the same seed, and the numbers agree: the stand-in runs the CPU's kernels (attention
takes the math kernel there, hence the tolerances: float rounding, 1e-5 relative). Under autocast the stand-in casts
as CUDA does, not as the CPU does: those runs must finish with finite numbers.

Not here: CUDA-only code (memory statistics, nccl ranks): the gpu tier (tests/gpu) on a real GPU; a run's servers in
their own processes: test_stand_in_gpu_processes.py. CUDA graphs run on the stand-in's own (stand_in_graphs.py):
a run here, the decoder's rules in tests/unit/inference/test_cuda_graphs_on_the_stand_in.py.
"""

from __future__ import annotations

import math
import threading

import pytest
import torch
from small_run import SMALL_RUN
from stand_in_gpu import DEVICE, OPS, SYNCS, FakeGpuTensor, stand_in_gpu
from stand_in_graphs import REPLAYS, stand_in_graphs

import rlrm.engine.actor.logprobs as logprobs
from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import load_run_profile, start_run, train
from rlrm.inference.base import SamplingParams
from rlrm.inference.decode import decode
from rlrm.inference.kv_cache import distinct_rows
from rlrm.inference.static_decode import StaticDecoder
from rlrm.launch.server.backends import ClassifierBackend, ServerConfig
from tests.unit.inference.conftest import tiny_qwen2

# the numbers of a step that must not depend on the device (timings, latencies and memory do)
SAME = ("critic/score/mean", "critic/advantages/max", "actor/pg_loss", "actor/entropy", "actor/grad_norm")


def test_the_stand_in_refuses_what_cuda_refuses_and_allows_what_it_allows():
    with stand_in_gpu():
        on_device = torch.arange(6.0, device=DEVICE)
        assert isinstance(on_device, FakeGpuTensor) and on_device.device == DEVICE
        scalar, index = torch.tensor(2.0), torch.tensor([5, 0])
        refused = {
            "made on the CPU": lambda: on_device + torch.arange(6.0),
            "device indices into a CPU tensor": lambda: torch.arange(6.0)[on_device.long()[:2]],
            "a CPU scalar where the op checks devices itself": lambda: torch.clamp(on_device, min=scalar),
            "two CPU scalars": lambda: torch.addcmul(on_device, scalar, scalar),
            "a CPU scalar written": lambda: torch.tensor(1.0).add_(on_device.sum()),
            "CPU values put by indexing": lambda: on_device.clone().index_put_((index,), torch.ones(2)),
            "a CPU generator": lambda: torch.multinomial(on_device + 1, 1, generator=torch.Generator()),
        }
        for what, op in refused.items():
            with pytest.raises(RuntimeError, match="same device|CPU scalars|generator"):
                op()
                pytest.fail(what)
        with pytest.raises(TypeError, match="numpy"):
            on_device.numpy()
        assert (on_device * scalar).tolist() == [0, 2, 4, 6, 8, 10]  # a 0-dim CPU tensor is a scalar here
        assert torch.where(on_device > 2, scalar, torch.tensor(0.0)).tolist() == [0, 0, 0, 2, 2, 2]
        assert on_device[index].tolist() == [5, 0]  # CPU indices into a device tensor
        assert on_device.clone().index_put_((index,), scalar).tolist() == [2, 1, 2, 3, 4, 2]
        on_cpu = torch.zeros(3, requires_grad=True)
        moved = on_cpu.to(DEVICE)  # a copy, as on CUDA, that gradients flow back through
        (moved * 2).sum().backward()
        assert on_cpu.grad.tolist() == [2.0, 2.0, 2.0] and type(on_cpu.grad) is torch.Tensor
        with torch.no_grad():
            moved.add_(1)
        assert on_cpu.tolist() == [0.0, 0.0, 0.0]
        with torch.inference_mode():  # where the mode sees aten.to whole, with the device as an argument or a tensor
            for copy in (
                on_cpu.to(DEVICE, torch.float16),
                on_cpu.to(device=DEVICE, dtype=torch.bool),
                on_cpu.to(moved),
            ):
                assert isinstance(copy, FakeGpuTensor) and copy.device == DEVICE and not copy.any()
        back = moved.cpu()
        assert type(back) is torch.Tensor and back.tolist() == [1.0, 1.0, 1.0]
        for mode in (torch.no_grad, torch.inference_mode):  # each read of device data is counted, once
            with mode():
                before = SYNCS[0]
                int(on_device.sum()), bool(on_device.any()), on_device.tolist(), on_device.cpu(), on_device.nonzero()
                assert SYNCS[0] - before == 5
                on_device.new_zeros(2, device="cpu"), on_device + 1  # no read
                assert SYNCS[0] - before == 5


def test_the_stand_in_catches_the_first_cuda_crash():
    """kv_cache.distinct_rows as it was before 42b82d2 (its index made on the CPU) stopped every CUDA run."""

    def distinct_rows_before_the_fix(ids, mask):
        key = torch.cat([ids, mask.to(ids.dtype)], dim=1)
        _, inverse = torch.unique(key, dim=0, return_inverse=True)
        rows = torch.arange(len(ids))
        index = torch.full((int(inverse.max()) + 1,), len(ids)).scatter_reduce_(0, inverse, rows, reduce="amin")
        return index, inverse

    ids = torch.tensor([[5, 6, 7], [5, 6, 7], [8, 9, 1]])
    mask = torch.ones_like(ids)
    expected = distinct_rows(ids, mask)
    assert [t.tolist() for t in distinct_rows_before_the_fix(ids, mask)] == [t.tolist() for t in expected]
    with stand_in_gpu():
        with pytest.raises(RuntimeError, match="same device.*scatter_reduce"):
            distinct_rows_before_the_fix(ids.to(DEVICE), mask.to(DEVICE))
        index, inverse = distinct_rows(ids.to(DEVICE), mask.to(DEVICE))
        assert isinstance(index, FakeGpuTensor) and [index.tolist(), inverse.tolist()] == [t.tolist() for t in expected]


@pytest.mark.parametrize("backend", ["dynamic", "static"])
def test_decoding_on_the_stand_in_samples_the_cpus_tokens(backend):
    prompts = [[3, 4, 5, 6], [3, 4, 5, 6], [7, 8], [9, 10, 11, 12, 13]]
    params = [SamplingParams(temperature=(1.0, 0.0)[i % 2], top_k=(-1, 5)[i % 2], max_new_tokens=6) for i in range(4)]
    seeds, stops = [11, 12, 13, 14], [[2]] * 4

    def run(model):
        with torch.inference_mode():
            if backend == "dynamic":
                return decode(model, prompts, params, seeds, stops, 0, threading.Event(), True)
            return StaticDecoder(model, "eager", max_batch_size=8).decode(
                prompts, params, seeds, stops, 0, threading.Event(), True
            )

    on_cpu = run(tiny_qwen2())
    with stand_in_gpu():
        on_device = run(tiny_qwen2().to(DEVICE))
    assert [row[0] for row in on_device] == [row[0] for row in on_cpu]
    for (_, log_probs, _), (_, expected, _) in zip(on_device, on_cpu):
        assert torch.allclose(torch.tensor(log_probs), torch.tensor(expected), atol=1e-5)


def test_a_log_prob_forward_reads_the_device_once_and_scores_as_on_the_cpu():
    """Which rows share a prompt, and where the prompts start, come from the batch's CPU copies (`prompt_key`,
    `prompt_start`, made by `collate`): reading them from the device tensors took about six reads (waits for the
    GPU) per micro-batch's forward. What is left is transformers' own mask check (`masking_utils.
    _ignore_causal_mask_sdpa`): once in the prompt pass, and once more where the rows' prompts differ in length."""
    import dataclasses

    from rlrm.engine.actor.batch import collate
    from rlrm.inference.base import Completion

    generator = torch.Generator().manual_seed(0)
    prompts = [[3, 4, 5, 6], [7, 8], [9, 10, 11], [7, 8]]  # the last is the second again: one prompt run for both
    completions = [
        Completion(p, torch.randint(3, 60, (2 + j,), generator=generator).tolist(), [0.0] * (2 + j), "stop")
        for p in prompts
        for j in range(4)
    ]
    batch = collate(completions, pad_token_id=0)
    model = tiny_qwen2()
    on_cpu, _ = logprobs.response_log_probs(model, batch, 1.0, micro_batch_size=4)

    def reads(b, micro_batch_size: int) -> int:
        with stand_in_gpu(), torch.no_grad():
            on_device = tiny_qwen2().to(DEVICE)
            on_device.load_state_dict(model.state_dict())
            moved = b.to(DEVICE)
            assert b.prompt_key is None or moved.prompt_key.device.type == "cpu"  # kept on the CPU
            before = SYNCS[0]
            out, _ = logprobs.response_log_probs(on_device, moved, 1.0, micro_batch_size)
            count = SYNCS[0] - before
            assert torch.allclose(out.cpu(), on_cpu, atol=1e-5)
        return count

    assert reads(batch, 4) == 4 and reads(batch, 16) == 2  # each group a micro-batch; all groups in one
    without = dataclasses.replace(batch, prompt_key=None, prompt_start=None)  # a batch made before them
    assert reads(without, 4) == 24 and reads(without, 16) == 7


@pytest.mark.parametrize("backend", ["dynamic", "static"])
@pytest.mark.parametrize("padded", [False, True])
def test_decoding_reads_the_device_once_every_4_tokens_whatever_the_rows(backend, padded):
    """Each read of device data by the host (`int(t)`, `bool(t)`, `.tolist()`, `.cpu()`) waits for the GPU. Both
    loops read how many rows are left once every 4 tokens (so the host queues steps ahead) and build their
    attention masks without a read (transformers' own mask builder checks whether the padding mask is all ones:
    `masking_utils._ignore_causal_mask_sdpa`, a read a token). Neither reads once a row. Without EOS every row
    runs to its limit; setting up and collecting the batch take a dozen reads."""

    def reads(rows: int, new_tokens: int) -> int:
        params = [SamplingParams(temperature=1.0, max_new_tokens=new_tokens)] * rows
        prompts = [[3, 4, 5, 6], [7, 8] if padded else [9, 10, 11, 12]] * (rows // 2)
        with stand_in_gpu(), torch.inference_mode():
            model = tiny_qwen2().to(DEVICE)
            decoder = StaticDecoder(model, "eager", max_batch_size=rows) if backend == "static" else None
            before = SYNCS[0]
            args = (prompts, params, list(range(rows)), [[]] * rows, 0, threading.Event(), True)
            decoder.decode(*args) if decoder else decode(model, *args)
            return SYNCS[0] - before

    few_rows, many_rows, longer = reads(8, 16), reads(32, 16), reads(32, 64)
    assert few_rows == many_rows
    assert longer - many_rows == 48 / 4
    assert many_rows - 16 / 4 <= 12


def test_a_disrm_server_scores_on_the_stand_in_as_on_the_cpu(random_disrm_path):
    sequences = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
    on_cpu = ClassifierBackend(ServerConfig(str(random_disrm_path), role="disrm", device="cpu"))._forward(sequences)
    with stand_in_gpu():
        backend = ClassifierBackend(ServerConfig(str(random_disrm_path), role="disrm", device="cuda"))
        assert next(backend.model.parameters()).device == DEVICE
        before = OPS[0]
        on_device = backend._forward(sequences)
        assert OPS[0] - before > 20
    assert on_device == pytest.approx(on_cpu, rel=1e-5, abs=1e-6)


def _train(tmp_path, name, settings, profile="tiny-rule", on_device=False, steps=2):
    run_dir = start_run(load_profile(profile, [*SMALL_RUN, f"trainer.total_steps={steps}", *settings]), tmp_path / name)
    if on_device:
        before = OPS[0]
        with stand_in_gpu():
            result = train(run_dir)
        assert OPS[0] - before > 2_000  # the run's maths ran on the stand-in, not on the CPU beside it
    else:
        result = train(run_dir)
    assert result.last_step == steps and not result.interrupted and result.stopped is None
    return run_dir, read_metrics(run_dir / "metrics.jsonl")


def _assert_same_numbers(on_cpu, on_device, keys=SAME):
    assert len(on_device) == len(on_cpu)
    for cpu_row, device_row in zip(on_cpu, on_device):
        for key in keys:
            if key in cpu_row:
                assert device_row[key] == pytest.approx(cpu_row[key], rel=1e-5, abs=1e-6), (cpu_row["step"], key)


RUNS = {
    "sync-held-out-checkpoints": ["trainer.val_every=2", "data.val_size=16", "trainer.save_every=1"],
    "stream": ["trainer.mode=stream"],
    "pipeline": ["trainer.mode=pipeline"],
    "one-step-off": ["trainer.mode=one-step-off"],
    "fully-async": ["trainer.mode=fully-async"],
    "reference-kl": ["actor.use_kl_loss=true"],
    "logits-in-chunks": ["actor.logits_chunk_tokens=3"],
}


@pytest.mark.parametrize("settings", list(RUNS.values()), ids=list(RUNS))
def test_a_run_on_the_stand_in_gives_the_cpus_numbers(tmp_path, monkeypatch, settings):
    if "actor.logits_chunk_tokens=3" in settings:  # chunked whatever the size of the tiny logits
        monkeypatch.setattr(logprobs, "WHOLE_BELOW_BYTES", 0)
    _, on_cpu = _train(tmp_path, "cpu", settings)
    _, on_device = _train(tmp_path, "device", [*settings, "trainer.device=cuda"], on_device=True)
    _assert_same_numbers(on_cpu, on_device, SAME + ("actor/kl_loss", "val/accuracy"))


@pytest.mark.parametrize("mode", ["sync", "stream", "pipeline", "one-step-off", "fully-async"])
def test_a_run_decoding_with_cuda_graphs_on_the_stand_in_gives_the_cpus_numbers(tmp_path, capfd, mode):
    """rollout.compile=cudagraphs, each decode step captured and replayed by the stand-in CUDA graph, against the
    dynamic loop on the CPU (rollout.compile=off): the same tokens, so the same numbers up to float rounding. In the
    overlapping modes the rollout thread captures and replays while the trainer's thread updates."""
    settings = ["trainer.val_every=2", "data.val_size=16", f"trainer.mode={mode}"]
    _, on_cpu = _train(tmp_path, "cpu", settings)
    before = REPLAYS[0]
    with stand_in_graphs():
        _, on_device = _train(
            tmp_path, "device", [*settings, "rollout.compile=cudagraphs", "trainer.device=cuda"], on_device=True
        )
    assert REPLAYS[0] - before > 20  # decoded by replays, not by a fallback to the eager step
    assert "warning: rollout.compile" not in capfd.readouterr().err
    _assert_same_numbers(on_cpu, on_device, SAME + ("val/accuracy",))


def test_a_checkpoint_saved_on_the_stand_in_resumes_on_the_cpu(tmp_path):
    _, on_cpu = _train(tmp_path, "cpu", [])
    run_dir, _ = _train(tmp_path, "device", ["trainer.save_every=1", "trainer.device=cuda"], on_device=True, steps=1)
    load_run_profile(run_dir, total_steps=2)  # rlrm train --resume DIR --steps 2, here on the CPU
    profile = run_dir / "config.yaml"
    profile.write_text(profile.read_text().replace("device: cuda", "device: cpu"))
    assert train(run_dir).last_step == 2
    _assert_same_numbers(on_cpu, read_metrics(run_dir / "metrics.jsonl"))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mixed_precision_runs_on_the_stand_in(tmp_path, dtype):
    """Autocast on the stand-in casts as CUDA's (matrix products low, softmax and norms float32), which is not
    what CPU autocast does: here the run must finish with finite numbers and keep float32 master weights."""
    _, rows = _train(tmp_path, "device", [f"model.dtype={dtype}", "trainer.device=cuda"], on_device=True)
    for row in rows:
        assert all(math.isfinite(row[key]) for key in SAME), row
    if dtype == "float16":
        assert rows[-1]["actor/loss_scale"] == 2.0**16  # no overflow on the tiny policy


def test_the_agent_loop_runs_on_the_stand_in(tmp_path, tiny_tools_path):
    _, on_cpu = _train(tmp_path, "cpu", [], profile="tiny-tools")
    _, on_device = _train(tmp_path, "device", ["trainer.device=cuda"], profile="tiny-tools", on_device=True)
    _assert_same_numbers(on_cpu, on_device)


def gsm8k_row(a: int) -> dict:
    return {"question": f"Tom has {a} apples and buys {a + 2} more. How many?", "answer": f"...\n#### {2 * a + 2}"}


def math_row(a: int) -> dict:
    return {"problem": f"What is $\\frac{{{a}}}{{2}}$ doubled?", "solution": f"$\\boxed{{{a}}}$"}


@pytest.mark.parametrize(("profile", "row"), [("gsm8k-rule", gsm8k_row), ("math-rule", math_row)])
def test_the_gpu_profiles_settings_run_on_the_stand_in(tmp_path, profile, row):
    """gsm8k-rule ("for one GPU": bf16 mixed precision, KL to a reference, micro-batches of 16, 320 rows decoded
    together), and math-rule (its MATH data and rule) with the tiny policy and a few local problems of the data's
    shape instead of the hub's, smaller."""
    import json

    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "test"):
        (data / f"{split}.jsonl").write_text("".join(json.dumps(row(a)) + "\n" for a in range(1, 9)))
    settings = [f"data.path={data}", "model.path=tiny:policy", "data.train_batch_size=4", "rollout.n=2"]
    settings += ["rollout.max_new_tokens=8", "actor.mini_batch_size=4", "actor.micro_batch_size=2"]
    settings += ["trainer.val_every=0", "trainer.save_every=0", "trainer.num_threads=1", "logging.console=none"]
    run_dir = start_run(load_profile(profile, [*settings, "trainer.total_steps=2"]), tmp_path / "run")
    before = OPS[0]
    with stand_in_gpu():
        result = train(run_dir)
    assert result.last_step == 2 and result.stopped is None and OPS[0] - before > 2_000
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert all(math.isfinite(row[key]) for row in rows for key in (*SAME, "actor/kl_loss"))


SMALL_SET = ["data.train_batch_size=4", "rollout.n=2", "rollout.max_new_tokens=8", "actor.mini_batch_size=4"]
COMMANDS = {
    "inspect-reward": ["inspect", "reward", "--profile", "tiny-rule"],
    "bench-reward-latency": ["bench", "reward-latency", "--profile", "tiny-rule", "--modes", "sync,fully-async"]
    + ["--steps", "2", "--repeats", "1", "--latency", "fixed:0.05", *(a for s in SMALL_SET for a in ("--set", s))],
}


@pytest.mark.parametrize("argv", list(COMMANDS.values()), ids=list(COMMANDS))
def test_the_commands_that_sample_the_policy_in_process_run_on_the_stand_in(tmp_path, argv):
    from typer.testing import CliRunner

    from rlrm.cli.main import app

    if argv[0] == "bench":
        argv = [*argv, "--out", str(tmp_path / "bench")]
    before = OPS[0]
    with stand_in_gpu():
        result = CliRunner().invoke(app, [*argv, "--set", "trainer.device=cuda"])
    assert result.exit_code == 0, result.output[-2000:]
    assert OPS[0] - before > 2_000
