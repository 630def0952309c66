"""GSM8K and MATH rows -> Examples, from the hub or a local file, in the datasets' own shapes or verl's.

Raw GSM8K (`data.source: gsm8k`): `question`, `answer` ending in `#### N` (ground truth: N, commas removed); the
prompt is the question plus the instruction suffix, as verl's gsm8k preprocessing writes it.
Raw MATH (`data.source: math`): `problem` (or `question`) and the reference answer as `answer`, else the last
`\\boxed{...}` of the worked `solution` (Hendrycks MATH, MATH-lighteval, MATH-500); the prompt is the problem plus
the suffix.
verl parquet (either source): `prompt` (chat messages), `reward_model.ground_truth`, `data_source`, `extra_info`;
the messages are used as they are.

GSM8K's ground truths must be numbers (its rule compares the number after `####` as text); MATH's are text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rlrm.engine.data.example import Example
from rlrm.engine.math_answer import last_boxed
from rlrm.errors import DataError

_EXTS = (".jsonl", ".json", ".parquet")
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def load_rows(
    path: str, split: str, prompt_suffix: str, skip_bad_rows: bool, kind: str = "gsm8k"
) -> tuple[list[Example], int]:
    """Examples of one split and how many bad rows were skipped.

    Args:
        path: hub id, a local file, or a folder holding `<split>.jsonl|.json|.parquet`.
        split: split name (hub or folder), or a file path.
        prompt_suffix: appended to raw questions.
        skip_bad_rows: skip (and count) rows without a question or a ground truth (for gsm8k, a numeric one)
            instead of failing.
        kind: "gsm8k" or "math" (data.source).
    """
    source, rows, lines = _read_rows(path, split, kind)
    examples, skipped = [], 0
    for i, row in enumerate(rows):
        try:
            examples.append(_encodable(_to_example(row, i, split, prompt_suffix, kind)))
        except ValueError as exc:
            if not skip_bad_rows:
                where = f"line {lines[i]}" if lines else f"row {i + 1}"  # as an editor counts: from 1
                raise DataError(f"{source} {where}: {exc} (set data.skip_bad_rows=true to skip such rows)") from None
            skipped += 1
    if not examples:
        raise DataError(f"{source} has no usable rows")
    return examples, skipped


def split_source(path: str, split: str) -> str:
    """Where `split` is read from: the resolved local file, or `hub_id[split]`."""
    local = _local_file(path, split)
    return str(local.resolve()) if local is not None else f"{path}[{split}]"


def _read_rows(path: str, split: str, kind: str) -> tuple[str, list[dict], list[int] | None]:
    """Where the rows come from, the rows, and for a JSONL file each row's line number (blank lines are not rows)."""
    local = _local_file(path, split)
    if local is not None:
        return str(local), *_read_file(local)
    if Path(path).expanduser().exists() or path.startswith((".", "/", "~")):
        raise DataError(f"no {split!r} data at {path}: expected a file or a folder with {split}.jsonl/.json/.parquet")
    try:
        import datasets

        # GSM8K's hub repo has two configs ("main", "socratic"); MATH's have one
        ds = (
            datasets.load_dataset(path, "main", split=split)
            if kind == "gsm8k"
            else datasets.load_dataset(path, split=split)
        )
    except Exception as exc:  # hub errors come in many types; all mean "cannot get it"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"cannot load dataset {path!r} split {split!r}: {first}") from None
    return f"{path}[{split}]", [dict(r) for r in ds], None


def _local_file(path: str, split: str) -> Path | None:
    for candidate in (Path(split).expanduser(), Path(path).expanduser()):
        if candidate.is_file():
            return candidate
    folder = Path(path).expanduser()
    if folder.is_dir():
        for ext in _EXTS:
            if (folder / f"{split}{ext}").is_file():
                return folder / f"{split}{ext}"
    return None


def _read_file(path: Path) -> tuple[list[dict], list[int] | None]:
    if path.suffix not in _EXTS:
        raise DataError(f"{path}: unsupported file type {path.suffix!r}; use .jsonl, .json or .parquet")
    try:
        if path.suffix == ".parquet":  # plain Python values, as verl's datasets gives them (pandas: numpy arrays)
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist(), None
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (Windows editors) is no part of the data
        if path.suffix == ".json":
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                if exc.msg != "Extra data" or not _object_line(text):
                    raise
                return _json_lines(path, text)  # JSON lines under .json: what datasets' `to_json` writes
            if isinstance(data, dict):  # {"data": [...]}, or a file of one row
                return (data["data"] if "data" in data else [data]), None
            return data, None
        return _json_lines(path, text)
    except DataError:
        raise
    except Exception as exc:
        raise DataError(f"cannot read {path}: {exc}") from None


def _object_line(text: str) -> bool:
    """Whether the text's first line holds one JSON object whole: JSON lines, not a broken document."""
    first = next((line for line in text.split("\n") if line.strip()), "")
    try:
        return isinstance(json.loads(first), dict)
    except json.JSONDecodeError:
        return False


def _json_lines(path: Path, text: str) -> tuple[list[dict], list[int]]:
    rows, lines = [], []
    # "\n" only: splitlines() also splits at U+2028, U+2029 and U+0085, which JSON strings may hold raw
    for lineno, line in enumerate(text.split("\n"), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path} line {lineno}: not valid JSON ({exc.msg})") from None
            lines.append(lineno)
    return rows, lines


def _to_example(row: dict, index: int, split: str, suffix: str, kind: str) -> Example:
    if not isinstance(row, dict):
        raise ValueError(f"expected an object, got {type(row).__name__}")
    if row.get("prompt") is not None and not isinstance(row.get("prompt"), str):
        return _verl_row(row, index, split, kind)
    if kind == "math":
        return _math_row(row, index, split, suffix)
    question, answer = row.get("question"), row.get("answer")
    if not question or not isinstance(question, str):
        raise ValueError("no 'question' (nor verl's 'prompt' messages)")
    if not answer or "####" not in str(answer):
        raise ValueError("no ground truth: 'answer' must end with '#### N'")
    truth = _after_hashes(str(answer))
    _check_number(truth)
    return Example(
        uid=f"gsm8k/{split}/{index}",
        prompt=[{"role": "user", "content": f"{question} {suffix}".strip()}],
        ground_truth=truth,
        data_source="openai/gsm8k",
        extra_info={"split": split, "index": index, "question": question, "answer": str(answer)},
    )


def _math_row(row: dict, index: int, split: str, suffix: str) -> Example:
    question = row.get("problem") if row.get("problem") is not None else row.get("question")
    if not question or not isinstance(question, str):
        raise ValueError("no 'problem' (nor 'question', nor verl's 'prompt' messages)")
    answer, solution = row.get("answer"), row.get("solution")
    boxed = last_boxed(solution) if isinstance(solution, str) else None
    if answer is not None and str(answer).strip():
        truth = _answer_text(answer)
        if "####" in truth:  # a GSM8K row: its answer is the number after the last ####
            truth = _after_hashes(truth)
    elif boxed:
        truth = boxed.strip()
    else:
        raise ValueError("no ground truth: no 'answer', and no '\\boxed{...}' in 'solution'")
    extra = {"split": split, "index": index, "question": question}
    if isinstance(solution, str):
        extra["solution"] = solution
    return Example(
        uid=f"math/{split}/{index}",
        prompt=[{"role": "user", "content": f"{question} {suffix}".strip()}],
        ground_truth=truth,
        data_source=str(row.get("data_source") or "math"),
        extra_info=extra,
    )


def _verl_row(row: dict, index: int, split: str, kind: str) -> Example:
    prompt = row["prompt"]
    listed = isinstance(prompt, (list, tuple)) or type(prompt).__name__ == "ndarray"  # parquet: a numpy array
    messages = list(prompt) if listed else []
    if not messages or not all(isinstance(m, dict) and "role" in m and "content" in m for m in messages):
        raise ValueError("'prompt' must be a list of {role, content} messages")
    messages = [dict(m) for m in messages]
    reward_model = row.get("reward_model") or {}
    truth = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
    if truth is None or str(truth).strip() == "":
        raise ValueError("no ground truth: 'reward_model.ground_truth' is missing")
    truth = _answer_text(truth)
    if kind == "gsm8k":
        _check_number(truth)
    extra = row.get("extra_info") or {}
    if not isinstance(extra, dict):
        raise ValueError(f"'extra_info' must be an object, not {type(extra).__name__}")
    extra = dict(extra)
    return Example(
        uid=f"{row.get('data_source') or kind}/{split}/{extra.get('index', index)}",
        prompt=messages,
        ground_truth=truth,
        data_source=str(
            row.get("data_source") or ("openai/gsm8k" if kind == "gsm8k" else "math")
        ),  # a null one (files of several sources joined)
        extra_info=extra,
    )


def _after_hashes(answer: str) -> str:
    """GSM8K's ground truth: the text after an answer's last `####`, commas removed."""
    truth = answer.split("####")[-1].strip().replace(",", "")
    if not truth:
        raise ValueError("empty ground truth after '####'")
    return truth


def _answer_text(answer) -> str:
    """An answer as the rule compares it: a whole number stored as a float (pandas makes an int column with a gap
    float, some JSON writers all numbers) as the integer, `42.0` as `42`; a list or a dict refused (several answers,
    where the rule reads one: its text would be a Python repr no answer matches)."""
    if not isinstance(answer, (str, int, float)):  # a bool is one answer: its text
        raise ValueError(
            f"the ground truth is a {type(answer).__name__}, and the rule reads one answer: give one (a custom reward "
            "that wants several can take them from extra_info)"
        )
    if isinstance(answer, float) and answer.is_integer():
        answer = int(answer)
    return str(answer).strip()


def _encodable(example: Example) -> Example:
    """The example, when its prompt and ground truth are text a tokenizer can take: a lone surrogate (half of an
    emoji from a bad `\\ud83d` escape) loads from JSON but fails the tokenizer when its batch comes, steps later."""
    texts: list[tuple[str, object]] = [("ground truth", example.ground_truth)]
    texts += [(f"prompt message {k + 1}", m.get("content")) for k, m in enumerate(example.prompt)]
    for what, text in texts:
        if not isinstance(text, str):
            continue
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"the {what} holds {text[exc.start]!r} at character {exc.start}, half of a character (a bad \\u "
                "escape), which no tokenizer takes"
            ) from None
    return example


def _check_number(truth: str) -> None:
    # The GSM8K reward compares the number a response ends with to the ground truth as text, so a
    # truth such as "banana" or "1,200" can never be matched: every sample would silently score 0.
    if not _NUMBER.fullmatch(truth):
        raise ValueError(
            f"ground truth {truth!r} is not a number (such as 42, -3 or 2.5), so no answer could match it "
            "(text answers such as \\frac{1}{2}: data.source=math)"
        )
