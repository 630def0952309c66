"""Save and resume: `<run>/checkpoints/step_<k>/` holds everything a run needs to continue.

    step_<k>/model/          the policy in HF format (loadable with from_pretrained)
    step_<k>/state.pt        optimizer, scheduler, data cursor, RNG states (Python, numpy, torch, each GPU), step, counters
    step_<k>/shards/         actor.world_size > 1: each rank's shard of the model and optimizer
                             (torch.distributed.checkpoint); state.pt then holds no optimizer
    step_<k>/profile.json    the resolved profile it was trained with: a resume whose config.yaml names another
                             model (or dtype) is refused, naming the key (check_resume_model); other settings
                             edited since are named in one note (changed_settings)
    step_<k>/reference.json  with a KL loss: the reference model's folder and weights digest, so a resume keeps
                             the run's reference when `tiny:policy` (or a folder) has come to hold another build
                             (rlrm/engine/components.py: reference_for_resume)

A checkpoint is written to `step_<k>.tmp`, flushed to disk (fsync of every file and folder) and renamed when
complete, so a crash mid-save never leaves a half-written checkpoint that resume would pick up, and a power loss
after the older ones are pruned never leaves none.

Nothing in a checkpoint is ever unpickled: `state.pt` holds only tensors, numbers, strings, lists,
tuples and dicts (RNG states as tensors) and is read with `torch.load(weights_only=True)`; the
model folder must hold its weights as safetensors. A checkpoint whose weights are not finite is
never written, nor resumed from.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import re
import shlex
import shutil
import sys
from pathlib import Path

from rlrm.errors import ConfigError, ModelError, RunFolderError, TrainingError, clipped, writing_to
from rlrm.inference.loading import eos_token_ids

_STEP_DIR = re.compile(r"^step_(\d+)$")
# Weight files that are pickles: loading one can run arbitrary code, so a checkpoint never holds one.
_PICKLED_WEIGHTS = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
PROFILE_FILE = "profile.json"
MODEL_KEYS_FILE = "model_keys.json"  # older checkpoints: the `model` section alone
REFERENCE_FILE = "reference.json"


def save_checkpoint(
    run_dir: Path,
    step: int,
    model,
    tokenizer,
    state: dict,
    keep: int,
    write_extra=None,
    profile_data=None,
    reference: dict | None = None,
) -> Path | None:
    """Write checkpoint `step` atomically and prune older ones beyond `keep` (`write_checkpoint`, then
    `commit_checkpoint`)."""
    written = write_checkpoint(run_dir, step, model, tokenizer, state, write_extra, profile_data, reference)
    return None if written is None else commit_checkpoint(written, keep)


def write_checkpoint(
    run_dir: Path, step: int, model, tokenizer, state: dict, write_extra=None, profile_data=None, reference=None
) -> Path | None:
    """Write checkpoint `step` under its unfinished name (`step_N.tmp`, never listed nor resumed from), on disk.

    A policy whose weights hold NaN or inf is not saved (one warning line names the step): the
    newest checkpoint on disk stays the last good one, and the actor's non-finite guard stops
    the run as before.

    Args:
        run_dir: the run folder.
        step: the last completed step.
        model: the policy (saved with save_pretrained).
        tokenizer: saved next to the model so the folder loads on its own.
        state: trainer state (actor, loader, counters); RNG states are added here.
        write_extra: called with the unfinished checkpoint folder to add to it (the actor ranks write
            their torch.distributed.checkpoint shards under `shards/`), before it is renamed into place.
        profile_data: the resolved profile (JSON data), written as profile.json for resume to compare.
        reference: the reference model's identity (`model_reference`), written as reference.json.

    Returns:
        The unfinished folder for `commit_checkpoint`, or None when the weights were not finite.
    """
    import torch

    bad = nonfinite_parameter(model.state_dict().items())
    if bad is not None:
        print(
            f"warning: checkpoint step_{step} not saved: parameter {bad} holds NaN or inf", file=sys.stderr, flush=True
        )
        return None
    root = Path(run_dir) / "checkpoints"
    tmp = root / f"step_{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    _check_still_there(Path(run_dir))  # deleted mid-run: made again here, it would hold a checkpoint and no run
    try:
        with writing_to(tmp):
            tmp.mkdir(parents=True)
            with _stops_as_trained(model, tokenizer):
                model.save_pretrained(tmp / "model")
            tokenizer.save_pretrained(tmp / "model")
            payload = dict(state, step=step, rng=_rng_state())
            torch.save(payload, tmp / "state.pt")
            if profile_data is not None:
                (tmp / PROFILE_FILE).write_text(json.dumps(profile_data, indent=1, sort_keys=True))
            if reference is not None:
                (tmp / REFERENCE_FILE).write_text(json.dumps(reference, indent=1, sort_keys=True))
            if write_extra is not None:
                write_extra(tmp)
            _fsync_tree(tmp)  # on disk before it is named complete, and before any older one is pruned
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # never half a checkpoint, even unlisted: it holds the space
        code = exc.errno if isinstance(exc, OSError) else _said_errno(exc)  # an actor rank's arrives as its text
        if code not in _DISK_FIXES:
            raise
        raise TrainingError(_unwritten(run_dir, step, code)) from exc
    return tmp


_DISK_FIXES = {
    errno.ENOSPC: "free some space",
    errno.EDQUOT: "free some space (the disk quota is used up)",
    errno.EIO: "check the disk (an I/O error)",
    errno.EROFS: "make the file system writable (it is read-only)",
    errno.EFBIG: "raise the file-size limit (ulimit -f)",
    errno.EACCES: "make the run folder writable (permission denied)",
}


def _said_errno(exc: BaseException) -> int | None:
    """The disk error an actor rank's failure names in its message (its OSError does not cross processes)."""
    if not isinstance(exc, Exception):
        return None
    text = str(exc)
    for code in _DISK_FIXES:
        if os.strerror(code) in text:
            return code
    return None


def _unwritten(run_dir: Path, step: int, code: int) -> str:
    """The line for a checkpoint the disk refused: where, why, what to do, the room one takes, how to go on."""
    kept = list_checkpoints(run_dir)
    where = f"checkpoint step_{step} could not be written in {Path(run_dir) / 'checkpoints'}: {os.strerror(code)}"
    if not kept:  # nothing to resume from: the run is started again
        return f"{where}; {_DISK_FIXES[code]} and start the run again (no complete checkpoint to resume from)"
    size = f" (step {checkpoint_step(kept[-1])}'s takes {_size_mb(kept[-1]):.1f} MB)"
    return (
        f"{where}; {_DISK_FIXES[code]}{size if code in (errno.ENOSPC, errno.EDQUOT) else ''} and continue with "
        f"rlrm train --resume {shlex.quote(str(run_dir))} (newest complete checkpoint: {kept[-1].name})"
    )


def _check_still_there(run_dir: Path) -> None:
    if not run_dir.is_dir():
        raise RunFolderError(f"{run_dir} was removed while the run went on; nothing more is saved; start it again")


def _size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def commit_checkpoint(written: Path, keep: int) -> Path:
    """Name a checkpoint `write_checkpoint` wrote complete, and prune older ones beyond `keep`."""
    root = written.parent
    final = root / written.name.removesuffix(".tmp")
    _check_still_there(root.parent)
    shutil.rmtree(final, ignore_errors=True)
    written.rename(final)
    _fsync(root)  # the rename itself
    for old in list_checkpoints(root.parent)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for left in root.glob("step_*.tmp"):  # what a save killed midway left (never listed, never resumed from)
        shutil.rmtree(left, ignore_errors=True)
    return final


def _fsync(path: Path) -> None:
    """Flush a file's or a folder's entries to disk (what the page cache still holds)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _stops_as_trained(model, tokenizer):
    """The model's generation_config holding every id the run's responses ended at (the tokenizer's EOS and its
    own: `eos_token_ids`) and a pad id, while it is saved: a base model's config with an instruct chat template
    names only <|endoftext|>, and HF generate on the export ran past <|im_end|> (accuracy 0.031 against the run's
    0.375). The model in memory is left as it was."""
    config = getattr(model, "generation_config", None)
    if config is None:
        yield
        return
    before = (config.eos_token_id, config.pad_token_id)
    stops = eos_token_ids(tokenizer, model)
    if stops:  # none known: left as the model has it
        config.eos_token_id = stops[0] if len(stops) == 1 else stops
    if config.pad_token_id is None:
        config.pad_token_id = tokenizer.pad_token_id
    try:
        yield
    finally:
        config.eos_token_id, config.pad_token_id = before


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):  # files, then their folders
        _fsync(path)
    _fsync(folder)


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def checkpoint_step(ckpt_dir: Path) -> int:
    """The step a checkpoint folder (`step_N`) holds."""
    return int(Path(ckpt_dir).name.removeprefix("step_"))


def check_checkpoint(ckpt_dir: Path) -> None:
    """Refuse (ModelError) a checkpoint whose model folder holds pickled weights or non-finite ones.

    Run before the policy is loaded from `ckpt_dir/model`, so nothing in it is unpickled.
    """
    from safetensors import safe_open

    model_dir = Path(ckpt_dir) / "model"
    name = Path(ckpt_dir).name
    if not model_dir.is_dir():
        raise ModelError(f"checkpoint {name} is incomplete (model/ is missing): {_EARLIER}")
    pickled = sorted(p.name for p in model_dir.glob("*") if p.suffix in _PICKLED_WEIGHTS)
    if pickled:
        raise ModelError(
            f"{model_dir} holds pickled weights ({', '.join(pickled)}); rlrm never unpickles a checkpoint: "
            "keep only the safetensors files rlrm wrote"
        )
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ModelError(f"checkpoint {name} is incomplete ({model_dir} holds no .safetensors weights): {_EARLIER}")
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as f:
                bad = nonfinite_parameter((name, f.get_tensor(name)) for name in f.keys())
        except Exception as exc:  # safetensors' SafetensorError (a cut or edited file): not an importable type
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelError(
                f"checkpoint {Path(ckpt_dir).name}: {path.name} is damaged ({reason}): it was cut short or edited; "
                "delete that checkpoint folder to resume from an earlier one"
            ) from None
        if bad is not None:
            raise ModelError(
                f"checkpoint {Path(ckpt_dir).name} has non-finite weights ({bad} holds NaN or inf): cannot resume from it; "
                "delete it to resume from an earlier one"
            )
    if not (Path(ckpt_dir) / "state.pt").is_file():
        raise ModelError(f"checkpoint {name} is incomplete (state.pt is missing): {_EARLIER}")


_EARLIER = "delete that checkpoint folder to resume from an earlier one (none left: the run starts from step 0)"


def check_resume_model(ckpt_dir: Path, model_keys: dict) -> None:
    """Refuse (ConfigError, one line naming each key) a resume whose `model` section differs from the one checkpoint
    `ckpt_dir` was trained from: the weights would continue under another model's name, dtype or reference.
    A checkpoint written before rlrm recorded its model (no profile.json nor model_keys.json) is not checked."""
    saved_profile = _saved_profile(ckpt_dir)
    if saved_profile is not None:
        read, saved = Path(ckpt_dir) / PROFILE_FILE, saved_profile.get("model")
    elif (Path(ckpt_dir) / MODEL_KEYS_FILE).is_file():
        read = Path(ckpt_dir) / MODEL_KEYS_FILE
        saved = _read_json(read)
    else:
        return
    if not isinstance(saved, dict):
        raise ModelError(f"{read} is damaged (it holds no model section rlrm wrote); {_EARLIER}")
    changed = [k for k in sorted(saved.keys() | model_keys.keys()) if saved.get(k) != model_keys.get(k)]
    if changed:
        what = ", ".join(f"model.{k}={model_keys.get(k)!r} (trained with {saved.get(k)!r})" for k in changed)
        raise ConfigError(
            f"the run's config.yaml names another model than checkpoint {Path(ckpt_dir).name} was trained from: "
            f"{what}; restore {', '.join(f'model.{k}' for k in changed)} in config.yaml to resume, or start a new run "
            "with --profile"
        )


def read_reference(ckpt_dir: Path) -> dict | None:
    """What checkpoint `ckpt_dir` recorded of the run's reference model (reference.json), or None."""
    recorded = _read_json(Path(ckpt_dir) / REFERENCE_FILE)
    return recorded if isinstance(recorded, dict) and recorded.get("weights") else None


def changed_settings(ckpt_dir: Path, profile_data: dict) -> list[str]:
    """The settings of `profile_data` (a resolved profile as JSON data) that differ from those checkpoint `ckpt_dir`
    was trained with, each as `key (saved -> now)`; the step budget is not a setting. Empty for a checkpoint that
    recorded no profile."""
    saved = _saved_profile(ckpt_dir)
    if saved is None:
        return []
    before, now = _flat(saved), _flat(profile_data)
    # the budget and this resume's own --set are no edits; a key the checkpoint's rlrm did not have is a new default
    keys = sorted(before.keys() - _NOT_EDITS)
    return [
        f"{k} ({clipped(repr(before.get(k)), 24)} -> {clipped(repr(now.get(k)), 24)})"
        for k in keys
        if before.get(k) != now.get(k)
    ]


_NOT_EDITS = {"trainer.total_steps", "reward.allow_contract_change"}


def added_settings(ckpt_dir: Path, profile_data: dict) -> list[str]:
    """The settings of `profile_data` that checkpoint `ckpt_dir`'s profile did not have (an rlrm since upgraded
    added them), each as `key=value`, the value its default unless config.yaml sets it: they may change how the
    resumed run trains (a guard's confirm_steps, a loss normaliser), so a resume names them. Empty for a checkpoint
    that recorded no profile."""
    saved = _saved_profile(ckpt_dir)
    if saved is None:
        return []
    before, now = _flat(saved), _flat(_defaults_only(profile_data, _schema_defaults()))
    return [f"{k}={clipped(repr(now[k]), 24)}" for k in sorted(now.keys() - before.keys() - _NOT_EDITS)]


def _schema_defaults() -> dict:
    from rlrm.config.schema import Profile

    return Profile().model_dump(mode="json")


def _defaults_only(data: dict, schema: dict) -> dict:
    """`data` without the entries a user adds to an open mapping (reward.component_weights, headers): a setting
    an upgrade added is one the schema itself has."""
    kept = {}
    for key, value in data.items():
        if key not in schema:
            continue
        if isinstance(value, dict) and isinstance(schema[key], dict):
            value = _defaults_only(value, schema[key]) if schema[key] else {}  # an open mapping: the user's entries
        kept[key] = value
    return kept


def _saved_profile(ckpt_dir: Path) -> dict | None:
    path = Path(ckpt_dir) / PROFILE_FILE
    if not path.is_file():
        return None
    saved = _read_json(path)
    if not isinstance(saved, dict):
        raise ModelError(f"{path} is damaged (not the JSON rlrm wrote); {_EARLIER}")
    return saved


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise ModelError(f"{path} is damaged (not the JSON rlrm wrote); {_EARLIER}") from None


def _flat(data: dict, prefix: str = "") -> dict:
    """{"actor": {"lr": 1e-6}, "rule": {}} -> {"actor.lr": 1e-6}; lists are values."""
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def nonfinite_parameter(named_tensors) -> str | None:
    """The name of the first floating-point tensor holding NaN or inf, or None."""
    import torch

    for name, tensor in named_tensors:
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return name
    return None


def load_state(ckpt_dir: Path) -> dict:
    """The trainer state of a checkpoint; restores the RNG states as a side effect.

    Raises:
        ModelError: `state.pt` is unreadable or holds anything but tensors and plain data
            (it is never unpickled: `torch.load(weights_only=True)` only).
    """
    import pickle

    import torch

    path = Path(ckpt_dir) / "state.pt"
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:  # it holds more than tensors and plain data
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(
            f"{path} cannot be loaded as plain tensors and data (weights_only=True), so it is not resumed: {first}"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:  # cut short (a full disk, a copy) or edited
        first = str(exc).strip().split(". ")[0].splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(
            f"checkpoint {Path(ckpt_dir).name}: state.pt is damaged ({first}): it was cut short or edited; {_EARLIER}"
        ) from None
    if not isinstance(state, dict) or not {"actor", "loader", "step", "rng"} <= state.keys():
        raise ModelError(f"{path} is not an rlrm trainer state (expected actor, loader, step and rng entries)")
    _set_rng_state(state.pop("rng"))
    return state


def _rng_state() -> dict:
    """Every RNG state as tensors and numbers, so `weights_only=True` loads it."""
    import numpy as np
    import torch

    version, internal, gauss = random.getstate()
    state = np.random.get_state()
    if not isinstance(state, tuple):  # the global RandomState is MT19937, whose legacy state is a tuple
        raise RuntimeError(f"numpy's global random state is not MT19937's (got {type(state).__name__})")
    name, keys, pos, has_gauss, cached = state
    return {
        "python": {"version": version, "state": torch.tensor(internal, dtype=torch.int64), "gauss": gauss},
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
        "cuda": _cuda_rng_states(),
    }


def _cuda_rng_states() -> list:
    """Each visible GPU's RNG state (dropout and `torch.rand` on CUDA draw from it); none without CUDA.

    Read only where this process already uses CUDA: asking would otherwise start a CUDA context (GPU memory,
    seconds) in a run on the CPU of a GPU machine."""
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return []
    return list(torch.cuda.get_rng_state_all())


def _set_rng_state(rng: dict) -> None:
    import numpy as np
    import torch

    py, npy = rng["python"], rng["numpy"]
    random.setstate((py["version"], tuple(py["state"].tolist()), py["gauss"]))
    keys = npy["keys"].numpy().astype(np.uint32)
    np.random.set_state((npy["name"], keys, npy["pos"], npy["has_gauss"], npy["cached_gaussian"]))
    torch.set_rng_state(rng["torch"])
    _set_cuda_rng_states(rng.get("cuda", []))  # checkpoints before 2026-11-27 hold none


def _set_cuda_rng_states(states: list) -> None:
    """Restore the GPUs' RNG states saved with the checkpoint, as far as this machine has the GPUs: a run saved on
    a GPU and resumed on the CPU draws nothing on CUDA, one resumed on fewer GPUs restores those it has."""
    import torch

    if not states or not torch.cuda.is_available():
        return
    for index, state in enumerate(states[: torch.cuda.device_count()]):
        torch.cuda.set_rng_state(state, index)
