"""Datasets: synthetic splits, GSM8K files in both shapes, bad rows, the resumable loader, prompt lengths."""

from __future__ import annotations

import json
import random

import pandas as pd
import pytest

from rlrm.config.schema import PROMPT_SUFFIX, DataConfig, SyntheticConfig
from rlrm.engine.data.dataset import load_splits
from rlrm.engine.data.example import Example
from rlrm.engine.data.loader import PromptLoader
from rlrm.engine.data.prompts import encode_prompts
from rlrm.engine.data.rows import load_rows
from rlrm.engine.data.synthetic import synthetic_splits
from rlrm.engine.rewards.gsm8k import compute_score
from rlrm.errors import ConfigError, DataError


def test_synthetic_splits_are_seeded_disjoint_and_correct():
    cfg = SyntheticConfig(num_train=300, num_test=50, seed=3)
    train, test = synthetic_splits(cfg, PROMPT_SUFFIX)
    again, _ = synthetic_splits(cfg, PROMPT_SUFFIX)
    assert [e.prompt for e in train] == [e.prompt for e in again]
    assert len(train) == 300 and len(test) == 50
    assert not {e.extra_info["question"] for e in train} & {e.extra_info["question"] for e in test}
    for ex in train + test:
        assert ex.prompt[0]["content"].endswith(PROMPT_SUFFIX)
        # the worked solution is right by the reward's own rule, and its equation holds
        assert compute_score(ex.extra_info["solution"], ex.ground_truth) == 1.0
        lhs, rhs = ex.extra_info["solution"].split("\n")[0].split(" = ")
        assert eval(lhs) == int(rhs) >= 0  # noqa: S307 - our own generated arithmetic


def test_synthetic_difficulty_knobs():
    cfg = SyntheticConfig(num_train=100, num_test=10, num_operands=3, ops=["*"], min_value=2, max_value=4)
    train, _ = synthetic_splits(cfg, "")
    assert all(ex.extra_info["solution"].count("*") == 2 for ex in train)
    other, _ = synthetic_splits(SyntheticConfig(num_train=100, num_test=10, seed=99), "")
    assert [e.prompt for e in other] != [
        e.prompt for e in synthetic_splits(SyntheticConfig(num_train=100, num_test=10), "")[0]
    ]


def test_synthetic_too_few_distinct_problems_is_an_error():
    with pytest.raises(ConfigError, match="distinct .*num_train"):
        synthetic_splits(SyntheticConfig(num_train=5000, num_test=10, min_value=1, max_value=2, ops=["+"]), "")


RAW = [
    {"question": "Ann has 2 cats and buys 3. How many?", "answer": "2 + 3 = 5\n#### 5"},
    {"question": "Big numbers?", "answer": "so\n#### 1,200"},
]


def _verl_rows():
    return [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": "Q1 " + PROMPT_SUFFIX}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "72"},
            "extra_info": {"split": "train", "index": 0},
        }
    ]


def test_raw_jsonl_shape(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in RAW))
    examples, skipped = load_rows(str(path), "train", PROMPT_SUFFIX, skip_bad_rows=False)
    assert skipped == 0
    assert examples[0].prompt == [{"role": "user", "content": f"{RAW[0]['question']} {PROMPT_SUFFIX}"}]
    assert [e.ground_truth for e in examples] == ["5", "1200"]


def test_verl_parquet_shape_in_a_folder(tmp_path):
    pd.DataFrame(_verl_rows()).to_parquet(tmp_path / "train.parquet")
    pd.DataFrame(RAW).to_parquet(tmp_path / "test.parquet")
    cfg = DataConfig(source="gsm8k", path=str(tmp_path))
    train, test, info = load_splits(cfg)
    assert train[0].ground_truth == "72" and train[0].prompt[0]["content"].startswith("Q1")
    assert train[0].data_source == "openai/gsm8k"
    assert test[1].ground_truth == "1200"
    assert info == {"skipped_train": 0, "skipped_test": 0}


def test_verl_parquet_values_reach_a_reward_as_plain_python_as_verls_datasets_gives_them(tmp_path):
    """A list inside extra_info arrived as a numpy array (pandas' to_dict): `tags == ["a", "b"]` raised, json.dumps
    raised, `+ ["c"]` added element-wise, in a reward written for verl. A null data_source read "None"."""
    rows = _verl_rows() * 2
    rows[0] = dict(
        rows[0], extra_info={"split": "train", "index": 0, "tags": ["algebra", "easy"], "meta": {"steps": [1, 2]}}
    )
    rows[1] = dict(
        rows[1], data_source=None, extra_info={"split": "train", "index": 1, "tags": [], "meta": {"steps": []}}
    )
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
    first, second = load_rows(str(tmp_path / "train.parquet"), "train", "", skip_bad_rows=False)[0]
    assert first.extra_info["tags"] == ["algebra", "easy"] and type(first.extra_info["tags"]) is list
    assert first.extra_info["meta"] == {"steps": [1, 2]} and json.dumps(first.extra_info)
    assert type(first.prompt) is list and first.prompt[0]["role"] == "user"
    assert second.data_source == "openai/gsm8k" and not second.uid.startswith("None")


def test_a_whole_number_stored_as_float_is_the_integer_answer(tmp_path):
    # pandas stores an int column with a gap as float: "72.0" never matched the rule's "72", every sample scored 0
    rows = [dict(_verl_rows()[0], reward_model={"style": "rule", "ground_truth": 72.0})]
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
    (example,), _ = load_rows(str(tmp_path / "train.parquet"), "train", "", skip_bad_rows=False)
    assert example.ground_truth == "72"
    assert compute_score("so #### 72", example.ground_truth) == 1.0


def test_bad_rows_error_or_skip(tmp_path):
    path = tmp_path / "d.jsonl"
    rows = RAW + [{"question": "no answer"}, {"answer": "#### 3"}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(DataError, match=r"d\.jsonl line 3: .*skip_bad_rows"):  # the line an editor shows
        load_rows(str(path), "train", "", skip_bad_rows=False)
    examples, skipped = load_rows(str(path), "train", "", skip_bad_rows=True)
    assert len(examples) == 2 and skipped == 2


def test_ground_truths_that_are_not_numbers_are_bad_rows(tmp_path):
    # "#### banana" used to load, and every response to it scored 0 with no word.
    raw = tmp_path / "raw.jsonl"
    lines = [json.dumps(r) for r in RAW] + ["", json.dumps({"question": "q", "answer": "so\n#### banana"})]
    raw.write_text("\n".join(lines))  # a blank line before the bad row: it is line 4, the third row
    with pytest.raises(DataError, match=r"raw\.jsonl line 4: ground truth 'banana' is not a number .*skip_bad_rows"):
        load_rows(str(raw), "train", "", skip_bad_rows=False)
    assert [e.ground_truth for e in load_rows(str(raw), "train", "", skip_bad_rows=True)[0]] == ["5", "1200"]
    verl = _verl_rows() + [dict(_verl_rows()[0], reward_model={"ground_truth": "1,200"})]
    pd.DataFrame(verl).to_parquet(tmp_path / "train.parquet")
    with pytest.raises(DataError, match=r"train\.parquet row 2: ground truth '1,200' is not a number"):
        load_rows(str(tmp_path), "train", "", skip_bad_rows=False)
    examples, skipped = load_rows(str(tmp_path), "train", "", skip_bad_rows=True)
    assert skipped == 1 and [e.ground_truth for e in examples] == ["72"]


def test_train_and_test_from_one_source_are_refused(tmp_path):
    one = tmp_path / "all.jsonl"
    one.write_text("\n".join(json.dumps(r) for r in RAW))
    with pytest.raises(
        DataError, match=r"train_split and data\.test_split both read .*all\.jsonl, so validation would score"
    ):
        load_splits(DataConfig(source="gsm8k", path=str(one)))
    with pytest.raises(DataError, match=r"both read openai/gsm8k\[train\]"):  # no hub access needed to see it
        load_splits(DataConfig(source="gsm8k", path="openai/gsm8k", test_split="train"))
    other = tmp_path / "held_out.jsonl"
    other.write_text(json.dumps(RAW[0]))
    train, test, _ = load_splits(DataConfig(source="gsm8k", path=str(one), test_split=str(other)))
    assert len(train) == 2 and len(test) == 1


def test_missing_file_and_bad_json(tmp_path):
    with pytest.raises(DataError, match="no 'train' data"):
        load_rows(str(tmp_path / "absent"), "train", "", False)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "#### 1"}\n{oops\n')
    with pytest.raises(DataError, match="line 2: not valid JSON"):
        load_rows(str(bad), "train", "", False)


def _examples(n):
    return [
        Example(uid=str(i), prompt=[{"role": "user", "content": str(i)}], ground_truth="0", data_source="t")
        for i in range(n)
    ]


def test_loader_resume_gives_identical_batches():
    full = PromptLoader(_examples(10), batch_size=4, seed=1)
    expected = [[e.uid for e in full.next_batch()] for _ in range(6)]  # crosses epoch boundaries
    first = PromptLoader(_examples(10), batch_size=4, seed=1)
    got = [[e.uid for e in first.next_batch()] for _ in range(2)]
    resumed = PromptLoader(_examples(10), batch_size=4, seed=1)
    resumed.load_state_dict(first.state_dict())
    got += [[e.uid for e in resumed.next_batch()] for _ in range(4)]
    assert got == expected
    assert sorted(sum(expected[:2], []) + expected[2][:2]) == sorted(str(i) for i in range(10))  # an epoch sees all
    assert expected[:3] != [[e.uid for e in PromptLoader(_examples(10), 4, seed=2).next_batch()] for _ in range(3)]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize(("n", "batch"), [(10, 4), (6, 4), (7, 3), (9, 8), (8, 4), (13, 5)])
def test_a_batch_crossing_into_the_next_epoch_never_holds_one_prompt_twice(n, batch, shuffle):
    # the next epoch's shuffle is its own: its first prompts were topped up unchecked (split 10, batch 4, seed 0:
    # step 3 was [9, 6, 6, 8], two groups of prompt 6)
    for seed in range(5):
        loader = PromptLoader(_examples(n), batch_size=batch, shuffle=shuffle, seed=seed)
        steps = [[e.uid for e in loader.next_batch()] for _ in range(40)]
        assert all(len(set(step)) == batch for step in steps), (seed, steps)
        flat = sum(steps, [])
        for epoch in range(len(flat) // n):  # every epoch still holds each prompt once
            assert sorted(flat[epoch * n : (epoch + 1) * n]) == sorted(str(i) for i in range(n)), (seed, epoch)
        for k in range(1, 40):  # and a resume after any step sees the same batches
            first = PromptLoader(_examples(n), batch_size=batch, shuffle=shuffle, seed=seed)
            for _ in range(k):
                first.next_batch()
            resumed = PromptLoader(_examples(n), batch_size=batch, shuffle=shuffle, seed=seed)
            resumed.load_state_dict(first.state_dict())
            assert [e.uid for e in resumed.next_batch()] == steps[k], (seed, k)


def test_a_resume_with_another_batch_size_keeps_each_epoch_whole_and_an_old_checkpoint_its_plain_order():
    for seed in range(10):
        first = PromptLoader(_examples(10), batch_size=4, seed=seed)
        flat = [e.uid for _ in range(3) for e in first.next_batch()]  # 12 prompts: epoch 1 at cursor 2
        resumed = PromptLoader(_examples(10), batch_size=3, seed=seed)
        resumed.load_state_dict(first.state_dict())
        while len(flat) < 20:
            flat += [e.uid for e in resumed.next_batch()]
        assert sorted(flat[10:20]) == sorted(str(i) for i in range(10)), (seed, flat[10:20])
    # a state without `head` (an rlrm before it) goes on in the epoch's plain shuffle, as that run trained it
    old = PromptLoader(_examples(10), batch_size=4, seed=0)
    old.load_state_dict({"epoch": 1, "cursor": 2})
    plain = list(range(10))
    random.Random(1).shuffle(plain)
    assert [e.uid for e in old.next_batch()] == [str(i) for i in plain[2:6]]


class _CharTokenizer:
    """A stand-in with the one method encode_prompts uses: one token per character."""

    def apply_chat_template(self, messages, add_generation_prompt, tokenize, return_dict):
        return [ord(c) for c in messages[0]["content"]]


def test_prompt_length_policies():
    exs = [
        Example("a", [{"role": "user", "content": "abc"}], "0", "t"),
        Example("b", [{"role": "user", "content": "abcdefgh"}], "0", "t"),
    ]
    tok = _CharTokenizer()
    with pytest.raises(DataError, match=r"prompt b has 8 tokens.*max_prompt_length=5"):
        encode_prompts(exs, tok, 5, "error")
    ids, kept, dropped = encode_prompts(exs, tok, 5, "drop")
    assert [e.uid for e in kept] == ["a"] and dropped == 1
    ids, kept, dropped = encode_prompts(exs, tok, 5, "truncate-left")
    assert ids[1] == [ord(c) for c in "defgh"] and dropped == 0


def _write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\x85"])
def test_jsonl_with_unicode_line_separator_inside_a_string_loads(tmp_path, sep):
    # json.dumps(ensure_ascii=False) writes U+2028/U+2029/U+0085 raw: each line below is valid JSON and the file
    # has exactly two '\n'-separated lines. str.splitlines() also splits on these characters, cutting the row.
    f = tmp_path / "train.jsonl"
    _write_jsonl(
        f,
        [
            {"question": f"What is 1+1?{sep}Think.", "answer": "1+1=2\n#### 2"},
            {"question": "What is 2+1?", "answer": "#### 3"},
        ],
    )
    examples, skipped = load_rows(str(f), "train", "", skip_bad_rows=False)
    assert [e.ground_truth for e in examples] == ["2", "3"]
    assert skipped == 0


def test_jsonl_with_utf8_bom_loads(tmp_path):
    # Files saved by Windows editors / PowerShell start with a UTF-8 BOM.
    f = tmp_path / "train.jsonl"
    f.write_text("\ufeff" + json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n", encoding="utf-8")
    examples, _ = load_rows(str(f), "train", "", skip_bad_rows=False)
    assert examples[0].ground_truth == "2"


BAD_VERL_ROWS = [
    {"prompt": 5, "reward_model": {"ground_truth": "1"}},
    {"prompt": [1], "reward_model": {"ground_truth": "1"}},
    {"prompt": [{"role": "user", "content": "x"}], "reward_model": {"ground_truth": "1"}, "extra_info": 5},
]


@pytest.mark.parametrize("bad", BAD_VERL_ROWS)
def test_malformed_verl_row_is_a_data_error_naming_file_and_line(tmp_path, bad):
    f = tmp_path / "train.jsonl"
    _write_jsonl(f, [{"question": "1+1?", "answer": "#### 2"}, bad])
    with pytest.raises(DataError, match=r"train\.jsonl line 2"):
        load_rows(str(f), "train", "", skip_bad_rows=False)


@pytest.mark.parametrize("bad", BAD_VERL_ROWS)
def test_malformed_verl_row_is_skipped_with_skip_bad_rows(tmp_path, bad):
    f = tmp_path / "train.jsonl"
    _write_jsonl(f, [{"question": "1+1?", "answer": "#### 2"}, bad])
    examples, skipped = load_rows(str(f), "train", "", skip_bad_rows=True)
    assert (len(examples), skipped) == (1, 1)


MATH_ROWS = [
    {"problem": "What is $\\frac{1}{2}+\\frac{1}{4}$?", "answer": "\\frac{3}{4}"},  # MATH-500: a short answer
    {"problem": "Solve $x+1=3$.", "solution": "Subtract: $x = \\boxed{2}$."},  # MATH-lighteval: a worked solution
    {"question": "Simplify $\\sqrt{8}$.", "solution": "$\\sqrt{8} = \\boxed{2\\sqrt{2}}$", "answer": None},
]


def test_math_rows_hold_text_ground_truths(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in MATH_ROWS))
    examples, skipped = load_rows(str(path), "train", "Box it.", skip_bad_rows=False, kind="math")
    assert skipped == 0
    assert [e.ground_truth for e in examples] == ["\\frac{3}{4}", "2", "2\\sqrt{2}"]
    assert examples[0].prompt == [{"role": "user", "content": MATH_ROWS[0]["problem"] + " Box it."}]
    assert examples[1].extra_info["solution"] == MATH_ROWS[1]["solution"] and examples[1].uid == "math/train/1"
    # GSM8K's loader refuses the same answers, naming the source that takes them
    with pytest.raises(DataError, match=r"no 'question'"):
        load_rows(str(path), "train", "", skip_bad_rows=False)


def test_math_rows_without_a_ground_truth_are_named(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"problem": "p", "solution": "no box"}))
    with pytest.raises(DataError, match=r"line 1: no ground truth: no 'answer', and no '\\boxed\{...\}' in 'solution'"):
        load_rows(str(path), "train", "", skip_bad_rows=False, kind="math")


def test_verl_parquet_with_text_ground_truths_needs_the_math_source(tmp_path):
    rows = [dict(_verl_rows()[0], data_source="lighteval/MATH", reward_model={"ground_truth": "\\frac{1}{2}"})]
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
    (example,), _ = load_rows(str(tmp_path / "train.parquet"), "train", "", skip_bad_rows=False, kind="math")
    assert example.ground_truth == "\\frac{1}{2}" and example.data_source == "lighteval/MATH"
    with pytest.raises(DataError, match=r"is not a number .*data\.source=math"):
        load_rows(str(tmp_path / "train.parquet"), "train", "", skip_bad_rows=False)


def test_load_splits_reads_math_by_the_source(tmp_path):
    for split in ("train", "test"):
        (tmp_path / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in MATH_ROWS))
    train, test, _ = load_splits(DataConfig(source="math", path=str(tmp_path), prompt_suffix=""))
    assert test[0].ground_truth == "\\frac{3}{4}" and len(train) == 3


def test_a_row_holding_half_a_character_is_named_when_the_data_loads(tmp_path):
    # "\ud83d" (half of an emoji, a bad escape in scraped data) loaded, and the run died at the step whose batch held
    # it with the tokenizer's TypeError naming no file; skip_bad_rows did not skip it
    path = tmp_path / "train.jsonl"
    bad = {"question": "Tom has 3 apples \ud83d. How many?", "answer": "#### 3"}
    path.write_text("\n".join(json.dumps(r) for r in [RAW[0], bad]))
    with pytest.raises(DataError, match=r"train\.jsonl line 2: the prompt message 1 holds '\\ud83d' at character 17"):
        load_rows(str(path), "train", "", skip_bad_rows=False)
    examples, skipped = load_rows(str(path), "train", "", skip_bad_rows=True)
    assert len(examples) == 1 and skipped == 1


def test_a_prompt_the_models_chat_template_refuses_is_named(tmp_path, tiny_policy_path):
    # a verl/TRL dataset's system message on a model whose template has no system role (Gemma, older Mistral's):
    # an 85-line jinja traceback after the model and reward started
    import shutil

    from transformers import AutoTokenizer

    model = tmp_path / "model"
    shutil.copytree(tiny_policy_path, model)
    (model / "chat_template.jinja").write_text(
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    )
    tokenizer = AutoTokenizer.from_pretrained(model)
    system = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    ex = Example("mine/train/0", system, "4", "mine")
    with pytest.raises(DataError, match=r"prompt mine/train/0 \(roles: system, user\): the model's chat template "
                       r"refuses it \(System role not supported\); merge a system message"):  # fmt: skip
        encode_prompts([ex], tokenizer, 128, "error")


def test_what_other_tools_write_loads_as_meant(tmp_path):
    # datasets' `to_json` writes JSON lines under .json ("Extra data: line 2"); a float answer (4.0, pandas' int
    # column with a gap) never matched \boxed{4}; a GSM8K row under data.source=math held its whole worked answer as
    # the truth; a list of answers became its Python repr, which no answer matches
    rows = [{"question": "2 + 2?", "answer": "2 + 2 = 4\n#### 4"}, {"problem": "x?", "answer": 4.0}]
    (tmp_path / "train.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    examples, _ = load_rows(str(tmp_path / "train.json"), "train", "", skip_bad_rows=False, kind="math")
    assert [e.ground_truth for e in examples] == ["4", "4"]
    listed = tmp_path / "list.jsonl"
    listed.write_text(json.dumps({"problem": "x?", "answer": ["4", "four"]}) + "\n")
    with pytest.raises(DataError, match=r"list.jsonl line 1: the ground truth is a list, and the rule reads one"):
        load_rows(str(listed), "train", "", skip_bad_rows=False, kind="math")
    verl = [dict(_verl_rows()[0], reward_model={"ground_truth": ["4", "four"]})]
    pd.DataFrame(verl).to_parquet(tmp_path / "verl.parquet")
    with pytest.raises(DataError, match="the ground truth is a ndarray|the ground truth is a list"):
        load_rows(str(tmp_path / "verl.parquet"), "train", "", skip_bad_rows=False, kind="math")


def test_a_json_document_is_read_as_one_and_its_errors_keep_their_place(tmp_path):
    one = tmp_path / "one.json"  # `to_json` of a one-row split: one object, no "data" wrapper
    one.write_text(json.dumps({"problem": "x?", "answer": "7"}) + "\n")
    assert [e.ground_truth for e in load_rows(str(one), "train", "", skip_bad_rows=False, kind="math")[0]] == ["7"]
    broken = tmp_path / "broken.json"  # a pretty-printed array with a stray bracket: not JSON lines
    broken.write_text(json.dumps([{"problem": "x?", "answer": "7"}], indent=1) + "\n]\n")
    with pytest.raises(DataError, match=r"Extra data: line 7"):
        load_rows(str(broken), "train", "", skip_bad_rows=False, kind="math")
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        json.dumps({"question": "q", "answer": "no number ####"}) + "\n" + json.dumps({"problem": "p", "answer": True})
    )
    with pytest.raises(DataError, match=r"line 1: empty ground truth after '####'"):
        load_rows(str(rows), "train", "", skip_bad_rows=False, kind="math")
    kept, skipped = load_rows(str(rows), "train", "", skip_bad_rows=True, kind="math")
    assert [e.ground_truth for e in kept] == ["True"] and skipped == 1  # a bool is one answer
