"""What `rlrm train --dry-run` says a run would start, and the profile rules of rollout servers."""

from __future__ import annotations

import importlib.util

from rlrm.config.loader import load_profile
from rlrm.engine.processes import planned_processes

ROUTER = importlib.util.find_spec("sglang_router") is not None


def test_served_tiny_rule_lists_both_replicas_and_the_router():
    lines = planned_processes(load_profile("tiny-rule-served"))
    replicas = [line for line in lines if line.startswith("# rollout.server replica")]
    assert len(replicas) == 2
    assert all(
        "-m rlrm.launch.server --model tiny:policy --role policy" in r and "--max-batch 256" in r for r in replicas
    )
    assert any(line.startswith("# rollout.server router:") for line in lines) == ROUTER


def test_policy_replicas_serve_in_model_dtype_unless_rollout_server_dtype_says_otherwise():
    """They were launched at rollout.server.dtype's float32 whatever model.dtype said (twice a bf16 policy's memory)."""

    def dtypes(*overrides: str) -> set[str]:
        profile = load_profile("tiny-rule", ["rollout.backend=server", *overrides])
        lines = [line for line in planned_processes(profile) if line.startswith("# rollout.server replica")]
        return {line.split("--dtype ", 1)[1].split()[0] for line in lines}

    for backend in ("embedded", "vllm", "sglang"):
        assert dtypes("model.dtype=bfloat16", f"rollout.server.backend={backend}") == {"bfloat16"}, backend
    assert dtypes() == {"float32"}
    assert dtypes("model.dtype=bfloat16", "rollout.server.dtype=float32") == {"float32"}


def test_vllm_rollout_and_reward_servers_show_their_environment_and_flags():
    profile = load_profile(
        "gsm8k-rule-served",
        [
            "rollout.server.gpu_ids=[1]",
            "reward.kind=genrm",
            "reward.server.model=judge",
            "reward.server.backend=sglang",
        ],
    )
    lines = planned_processes(profile)
    # the run's own key, in the environment only (shown as a placeholder: a dry run makes none)
    assert lines[0].startswith("# rollout.server replica 0: VLLM_API_KEY='<run key>' PYTHONPATH=")
    assert "/vllm_plugin VLLM_SERVER_DEV_MODE=1 CUDA_VISIBLE_DEVICES=1 " in lines[0]  # the key's middleware
    assert "--logprobs-mode processed_logprobs" in lines[0]
    assert (
        "-m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-0.5B-Instruct --host 127.0.0.1 --port 8000 "
        in lines[0]
    )
    assert lines[0].endswith(
        "--max-num-seqs 320 --generation-config vllm --logprobs-mode processed_logprobs "
        "--middleware rlrm_vllm_auth.RequireKey --gpu-memory-utilization 0.4"
    )
    assert not any(line.startswith("# rollout.server router") for line in lines)  # vLLM policy: rlrm's balancer
    assert any(
        "reward.server replica 0:" in line and "-m sglang.launch_server --model-path judge" in line for line in lines
    )


def test_running_addresses_launch_nothing():
    lines = planned_processes(
        load_profile(
            "tiny-rule",
            [
                "rollout.backend=server",
                "rollout.server.router=client",
                "rollout.server.addresses=http://10.0.0.5:30000",
            ],
        )
    )
    assert lines == ["# rollout.server: running servers http://10.0.0.5:30000 (nothing launched)"]


def test_vllm_rollout_servers_run_every_scheduling_mode():
    # the client keeps each vLLM request within one weight version (rlrm/launch/client/version_gate.py)
    for mode in ("one-step-off", "fully-async"):
        assert load_profile("gsm8k-rule-served", [f"trainer.mode={mode}"]).trainer.mode == mode


def test_embedded_policy_replicas_show_the_run_key_variable_and_the_weights_folder(tmp_path):
    weights = tmp_path / "w"  # a folder of this test's own: another process may use any fixed name under /tmp
    lines = planned_processes(load_profile("tiny-rule-served", [f"rollout.server.weights_dir={weights}"]))
    replica = lines[0]
    assert replica.startswith("# rollout.server replica 0: RLRM_API_KEY='<run key>' ")
    assert "--api-key-env RLRM_API_KEY" in replica and f"--weights-dir '{weights}/rlrm-weights-<pid>-<id>'" in replica
    assert not weights.exists()  # a dry run creates nothing
