"""Parity inputs: files with (prompt, response, group_id), and the tokens both paths see."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from rlrm.errors import DataError
from rlrm.parity.inputs import ParitySample, encode_samples, read_samples


def test_jsonl_and_parquet_give_the_same_samples(tmp_path):
    rows = [
        {"prompt": [{"role": "user", "content": "What is 2 + 3?"}], "response": "2 + 3 = 5\n#### 5", "group_id": 7},
        {"prompt": "What is 2 + 3?", "response": "#### 6", "group_id": 7, "sample_id": "b"},
    ]
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    pd.DataFrame(rows[:1]).to_parquet(tmp_path / "s.parquet")  # a list of message dicts, as verl's files hold
    from_jsonl = read_samples(tmp_path / "s.jsonl")
    assert [s.sample_id for s in from_jsonl] == ["0", "b"] and {s.group_id for s in from_jsonl} == {"7"}
    assert from_jsonl[1].prompt == [{"role": "user", "content": "What is 2 + 3?"}]
    assert read_samples(tmp_path / "s.parquet") == from_jsonl[:1]


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        ([{"prompt": "q", "group_id": 1}], "line 1: missing field(s) response"),
        (
            [{"prompt": "q", "response": "r", "group_id": 1}, {"response": "r"}],
            "line 2: missing field(s) prompt, group_id",
        ),
        ([{"prompt": [{"role": "user"}], "response": "r", "group_id": 1}], "list of {role, content} messages"),
        ([{"prompt": "q", "response": "r", "group_id": 1, "sample_id": "x"}] * 2, "'x' appears more than once"),
    ],
)
def test_bad_rows_are_named(tmp_path, rows, needle):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(DataError) as err:
        read_samples(path)
    assert needle in str(err.value)


def test_a_bom_a_line_separator_in_a_string_and_blank_lines_are_read_as_the_other_commands_read_them(tmp_path):
    # a Windows editor's byte-order mark failed on line 1; U+2028 inside a response (text pasted from the web) broke
    # its row in two (str.splitlines); an error named the row among non-blank rows, not the file's line
    good = {"prompt": "q", "response": "one\u2028two\x85three", "group_id": 1}
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (json.dumps(good, ensure_ascii=False) + "\n\n").encode("utf-8"))
    assert [s.response for s in read_samples(path)] == ["one\u2028two\x85three"]
    path.write_bytes(path.read_bytes() + json.dumps({"prompt": "q"}).encode("utf-8") + b"\r\n")
    with pytest.raises(DataError, match=r"s.jsonl line 3: missing field\(s\) response, group_id"):
        read_samples(path)


def test_truncation_keeps_the_end_like_the_loop_or_the_start_like_verl(tiny_policy_path):
    from transformers import AutoTokenizer

    from rlrm.engine.rewards.disrm import render_conversation

    tok = AutoTokenizer.from_pretrained(tiny_policy_path)
    sample = ParitySample(
        "0", "g", [{"role": "user", "content": "Mia has 12 pens. How many pens?"}], "12 + 7 = 19\n#### 19"
    )
    full = render_conversation(tok, sample.prompt, sample.response)
    end = encode_samples(tok, [sample], max_length=10, truncation="keep-end")
    start = encode_samples(tok, [sample], max_length=10, truncation="keep-start")
    assert end.ids[0] == full[-10:] and start.ids[0] == full[:10]
    assert end.truncated == [True] and end.full_lengths == [len(full)]
    assert end.response_tokens[0] == len(tok(sample.response, add_special_tokens=False)["input_ids"])
    short = encode_samples(tok, [sample], max_length=len(full))
    assert short.ids[0] == full and short.truncated == [False]
