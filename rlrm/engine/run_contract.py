"""`<run>/reward_contract.json`: the reward contract a run scores with, checked when the run is resumed.

    check_run_contract(run_dir, service.contract, allow_change=False, step=12)

A new run writes it. A resumed run whose contract differs (a template, parser, model, dtype, weights or custom
function that changed in between) stops with one line naming the parts that changed, unless
reward.allow_contract_change is true: then it goes on and the change is appended to the file's `changes`.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlrm.engine.rewards.contract import RewardContract, changed_parts, describe_change
from rlrm.errors import ConfigError, RunFolderError, write_whole
from rlrm.launch.common import progress

CONTRACT_FILE = "reward_contract.json"


def read_run_contract(run_dir: Path) -> dict | None:
    """The file's content, or None for a run started before rlrm wrote one."""
    path = Path(run_dir) / CONTRACT_FILE
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        saved = None
    if not isinstance(saved, dict) or not isinstance(saved.get("parts"), dict):
        raise RunFolderError(f"{path} is damaged (not the JSON rlrm wrote); restore it, or delete it to start afresh")
    return saved


def check_run_contract(run_dir: Path, contract: RewardContract, allow_change: bool, step: int) -> list[str]:
    """Write the contract (new run), or compare it with the saved one (resume); returns the parts that changed."""
    saved = read_run_contract(run_dir)
    record = {**contract.as_json(), "changes": []}
    if saved is not None:
        if saved.get("fingerprint") == contract.fingerprint:
            return []
        changed = changed_parts(saved["parts"], contract.parts) or ["version"]
        what = "; ".join(describe_change(n, saved["parts"].get(n), contract.parts.get(n)) for n in changed)
        if not allow_change:
            raise ConfigError(
                f"the reward changed since this run was started: {what}; its scores would not be the run's. Restore "
                f"the run's reward settings, or resume with --set reward.allow_contract_change=true to go on with "
                f"the new reward (recorded in {CONTRACT_FILE})"
            )
        progress.say(f"warning: resuming at step {step} with a changed reward: {what}")
        change = {"at_step": step, "changed": changed, "from": saved.get("fingerprint"), "to": contract.fingerprint}
        record["changes"] = [*saved.get("changes", []), change]
    else:
        changed = []
    text = json.dumps(record, indent=1, sort_keys=True)
    write_whole(Path(run_dir) / CONTRACT_FILE, lambda tmp: tmp.write_text(text))
    return changed


def contract_summary(run_dir: Path) -> str | None:
    """`3f2a9c01b7e4` or `3f2a9c01b7e4 (changed at step 12: template)`: the run's contract, for summaries; None
    for a run folder without reward_contract.json."""
    try:
        saved = read_run_contract(run_dir)
    except RunFolderError:
        return f"damaged {CONTRACT_FILE}"
    if saved is None:
        return None
    changes = "; ".join(f"step {c.get('at_step')}: {', '.join(c.get('changed', []))}" for c in saved.get("changes", []))
    short = str(saved.get("fingerprint", ""))[:12]
    return f"{short} (changed at {changes})" if changes else short
