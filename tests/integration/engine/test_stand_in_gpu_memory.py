"""Out of GPU memory in a run, on the stand-in GPU (tests/fixtures/stand_in_gpu.py): inside `memory_cap()` every new
allocation on the device raises torch's OutOfMemoryError, as on a full GPU.

A step that runs out of memory while generating or in the actor update stops the run with one line naming the
setting to lower, and nothing of it is committed: no metrics row, no checkpoint. The run then resumes from its last
checkpoint. The gpu tier checks the one-line errors on a real GPU too (tests/gpu/test_cuda_numbers.py).
"""

from __future__ import annotations

import pytest
import torch
from small_run import SMALL_RUN
from stand_in_gpu import DEVICE, memory_cap, stand_in_gpu

import rlrm.inference.hf as hf
from rlrm.config.loader import load_profile
from rlrm.engine.actor.actor import Actor
from rlrm.engine.checkpoint import list_checkpoints
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train
from rlrm.errors import OutOfDeviceMemory


def test_a_full_device_refuses_new_memory_and_keeps_what_it_holds():
    with stand_in_gpu():
        held = torch.arange(6.0, device=DEVICE)
        with memory_cap():
            assert held.view(2, 3)[1].tolist() == [3.0, 4.0, 5.0]  # views and reads: no new memory
            held.add_(1)  # in place: none either
            for new in (lambda: held * 2, lambda: torch.zeros(2, device=DEVICE), lambda: torch.ones(2).to(DEVICE)):
                with pytest.raises(torch.OutOfMemoryError, match="^CUDA out of memory"):
                    new()
        assert (held * 2).tolist() == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]  # the block ends, the memory is back


PHASES = {
    "while generating": (
        hf,
        "decode",
        r"^out of GPU memory while generating \(CUDA out of memory\): lower rollout\.max_batch_size \(now \d+; this "
        r"batch: \d+ rows x up to 8 new tokens\) or rollout\.max_new_tokens; the step was not committed$",
    ),
    "in the update": (
        Actor,
        "update",
        # tiny-rule's 256-sample micro-batches hold a whole mini-batch (4 prompts x 2 samples)
        r"^out of GPU memory in the actor update \(CUDA out of memory\): lower actor\.micro_batch_size \(now 256: a "
        r"forward and backward takes all 8 samples here; set it below 8\) \(the update stays the same, its gradients "
        r"accumulate\); the step was not committed$",
    ),
}


@pytest.mark.parametrize(
    ("phase", "mode"),
    # one-step-off generates step 2's batch before step 1 is saved: its update is the phase checked there
    [("while generating", "sync"), ("in the update", "sync"), ("in the update", "one-step-off")],
)
def test_out_of_gpu_memory_stops_the_step_in_one_line_and_the_run_resumes(tmp_path, monkeypatch, phase, mode):
    owner, name, said = PHASES[phase]
    settings = [*SMALL_RUN, "trainer.total_steps=2", "trainer.save_every=1", f"trainer.mode={mode}"]
    run_dir = start_run(load_profile("tiny-rule", [*settings, "trainer.device=cuda"]), tmp_path / "run")
    real, full = getattr(owner, name), []

    def on_a_full_device_once_step_1_is_saved(*args, **kwargs):
        if not list_checkpoints(run_dir):
            return real(*args, **kwargs)
        full.append(name)
        with memory_cap():
            return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, on_a_full_device_once_step_1_is_saved)
    with stand_in_gpu(), pytest.raises(OutOfDeviceMemory, match=said):
        train(run_dir)
    assert full  # the device was full in that phase, and the run stopped there
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] > 0] == [1]
    assert [c.name for c in list_checkpoints(run_dir)] == [list_checkpoints(run_dir)[0].name]  # step 1's alone
    monkeypatch.setattr(owner, name, real)
    with stand_in_gpu():
        assert train(run_dir).last_step == 2  # resumed from step 1's checkpoint
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] > 0] == [1, 2]
