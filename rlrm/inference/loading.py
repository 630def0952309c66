"""Loading a transformers model and tokenizer for generation, on the device the profile asks for.

    device = pick_device("auto")
    tokenizer = load_tokenizer(path)              # with a pad token and a chat template
    model = load_causal_lm(path, "float32", device)

Shared by the engine's in-process rollout and the embedded server; errors are one-line ModelErrors.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rlrm.errors import ModelError, clipped


def check_model_path(path: str, hint: str = "") -> str:
    """A local folder (checked to exist: a path-like name that does not is an error) or a hub id (passed)."""
    local = Path(path).expanduser()
    try:
        if local.exists():
            return str(local)
    except OSError as exc:  # a name the OS refuses (too long, say) is no folder, and no hub id either
        raise ModelError(
            f"model path {clipped(repr(path))} cannot be a folder ({exc.strerror}); give a local HF folder, a hub id "
            f"(org/name){hint}"
        ) from None
    if path.startswith((".", "/", "~")):
        raise ModelError(
            f"model path {clipped(repr(path))} does not exist; give a local HF folder, a hub id (org/name){hint}"
        )
    return path


def check_model_folder(path: str, setting: str) -> None:
    """A ModelError naming `setting` where a local folder a model is loaded from holds no model (no config.json, nor
    a Mistral-format params.json): before anything loads, where the tokenizer's own error would be cut short. A
    folder only a tokenizer is read from (a served model's name) is not checked here."""
    local = Path(path).expanduser()
    try:
        found = local.is_dir() and any((local / name).is_file() for name in ("config.json", "params.json"))
        unreadable = [f.name for f in local.iterdir() if f.is_file() and not os.access(f, os.R_OK)] if found else []
    except PermissionError:  # a folder this user cannot enter or list (another user's, mode 0700 or 0311)
        raise ModelError(
            f"{setting} {clipped(repr(path))} cannot be read by this user: check its permissions"
        ) from None
    if unreadable:  # safetensors says "No such file or directory" of a file it may not open
        raise ModelError(
            f"{setting} {clipped(repr(path))}: this user cannot read {unreadable[0]} in it"
            f"{f' (and {len(unreadable) - 1} more)' if len(unreadable) > 1 else ''}: check its permissions"
        )
    if local.is_dir() and not found:
        raise ModelError(
            f"{setting} {clipped(repr(path))} is a folder but not a model (no config.json in it); give the folder "
            "save_pretrained wrote, a hub id (org/name) or tiny:NAME"
        )


def check_chat_template(path: str, setting: str) -> None:
    """A ModelError naming `setting` where a local model folder's tokenizer has no chat template (none in
    tokenizer_config.json, no chat_template.jinja or .json beside it): before servers start and a step's rollout
    runs. A hub id is checked where its tokenizer loads."""
    local = Path(path).expanduser()
    if not (local / "tokenizer_config.json").is_file():
        return
    if (local / "chat_template.jinja").is_file() or (local / "chat_template.json").is_file():
        return
    try:
        config = json.loads((local / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # unreadable: the tokenizer's own error says so where it loads
    if not (isinstance(config, dict) and config.get("chat_template")):
        raise ModelError(
            f"{setting} {clipped(repr(path))} has no chat template in its tokenizer, so a prompt and response cannot "
            "be rendered in the format it was trained on: set tokenizer.chat_template and save_pretrained the "
            "tokenizer into that folder"
        )


def pick_device(name: str, setting: str = "trainer.device") -> str:
    """The torch device `name` (auto, cpu, cuda or cuda:N) stands for here: auto is cuda when a GPU is visible.
    A device this machine does not have is one ModelError naming `setting` (the option it came from)."""
    import torch

    fix = "--set trainer.device=cpu" if setting == "trainer.device" else f"{setting} cpu"
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    kind, _, index = name.partition(":")
    if name != "cpu" and (kind != "cuda" or (index and not index.isdigit()) or name.endswith(":")):
        raise ModelError(f"{setting} {name!r} is not a device; use auto, cpu, cuda or cuda:N")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"{setting}={name} but no CUDA device is visible; use {fix}")
    if index and int(index) >= torch.cuda.device_count():
        raise ModelError(
            f"{setting}={name} but this process sees {torch.cuda.device_count()} CUDA device(s) (CUDA_VISIBLE_DEVICES "
            f"renumbers them from 0); use cuda:0 to cuda:{torch.cuda.device_count() - 1}"
        )
    return name


def load_tokenizer(path: str):
    """AutoTokenizer for a folder or hub id, with a pad token guaranteed."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load the tokenizer of {path!r}: {_first_line(exc)}") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if tok.chat_template is None:
        raise ModelError(f"the tokenizer of {path!r} has no chat template; pick an instruct/chat checkpoint")
    return tok


def load_causal_lm(path: str, dtype: str, device: str):
    """A causal LM in eval mode on `device`."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-shard bars would drown the run's own display
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load the model {path!r}: {_first_line(exc)}") from None
    # transformers types the wrapped PreTrainedModel.to as taking the model again
    return model.to(device).eval()  # type: ignore[arg-type]


def eos_token_ids(tokenizer, model) -> list[int]:
    """Every id that ends a response: the tokenizer's EOS and the generation config's."""
    ids = {tokenizer.eos_token_id}
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(gen_eos, int):
        ids.add(gen_eos)
    elif gen_eos:
        ids.update(gen_eos)
    return sorted(i for i in ids if i is not None)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
