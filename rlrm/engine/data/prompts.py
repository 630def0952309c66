"""Chat messages -> prompt token ids, with the profile's policy for prompts that are too long."""

from __future__ import annotations

from rlrm.engine.data.example import Example
from rlrm.errors import DataError


def encode_prompts(
    examples: list[Example], tokenizer, max_prompt_length: int, policy: str
) -> tuple[list[list[int]], list[Example], int]:
    """Token ids of each prompt (chat template with the generation prompt).

    Args:
        policy: `error` (stop), `truncate-left` (keep the last tokens) or `drop` (skip, counted).

    Returns:
        (ids, kept examples, number dropped).
    """
    ids_out, kept, dropped = [], [], 0
    for ex in examples:
        ids = _rendered(tokenizer, ex)
        if len(ids) > max_prompt_length:
            if policy == "error":
                raise DataError(
                    f"prompt {ex.uid} has {len(ids)} tokens, more than data.max_prompt_length={max_prompt_length}; "
                    f"raise it (--set data.max_prompt_length={len(ids)}) or set data.prompt_too_long to truncate-left or drop"
                )
            if policy == "drop":
                dropped += 1
                continue
            ids = ids[-max_prompt_length:]
        ids_out.append(ids)
        kept.append(ex)
    return ids_out, kept, dropped


def check_some_fit(examples: list[Example], tokenizer, max_prompt_length: int) -> None:
    """DataError when not one of `examples` fits in `max_prompt_length` tokens (with data.prompt_too_long=drop every
    step would train on nothing). Stops at the first that fits: one prompt's encoding in the usual case."""
    shortest = None
    for ex in examples:
        length = len(_rendered(tokenizer, ex))
        if length <= max_prompt_length:
            return
        shortest = length if shortest is None else min(shortest, length)
    if shortest is not None:
        raise DataError(
            f"every one of the {len(examples)} train prompts is longer than data.max_prompt_length={max_prompt_length} "
            f"(the shortest has {shortest} tokens), so data.prompt_too_long=drop would leave nothing to train on; "
            f"raise it (--set data.max_prompt_length={shortest} or more)"
        )


def _rendered(tokenizer, ex: Example) -> list[int]:
    """The prompt's ids under the model's chat template; a DataError naming the prompt where the template refuses
    it (a system message to Gemma's or an older Mistral's, which raise a jinja TemplateError)."""
    from jinja2.exceptions import TemplateError  # transformers renders chat templates with jinja2

    try:
        return list(
            tokenizer.apply_chat_template(ex.prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
        )
    except TemplateError as exc:
        roles = ", ".join(str(m.get("role", "?")) for m in ex.prompt)
        raise DataError(
            f"prompt {ex.uid} (roles: {roles}): the model's chat template refuses it ({exc}); merge a system message "
            "into the first user message, or give the tokenizer a chat template that takes it"
        ) from None
