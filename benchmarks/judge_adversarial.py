"""How often tiny judges agree with the GSM8K rule on adversarial answers, kind by kind, on one shared set.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/judge_adversarial.py JUDGE_DIR [JUDGE_DIR ...] [--seed 7]

The set: two answers from `judge_negatives.adversarial_response` (the current recipe's kinds) for each held-out
problem of the judge recipe's seed 0 (`reward_problems(0, ...)`, none in any build's training data), drawn with
`random.Random(--seed)`, so judges of different recipes are compared on the same answers (each build's own
`adversarial_accuracy` in meta.json is measured on its recipe's kinds). Printed per judge: the share whose greedy
verdict equals the rule's label (no verdict counts as a miss), then per kind.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("judges", nargs="+", help="judge model folders (meta.json beside the weights)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlrm.engine.models.judge_negatives import adversarial_response
    from rlrm.engine.models.tiny_judge import JudgeRecipe, judge_all
    from rlrm.engine.models.tiny_pairs import reward_problems

    torch.set_num_threads(1)
    recipe = JudgeRecipe()
    _, heldout = reward_problems(0, recipe.num_train, recipe.num_test)
    rng = random.Random(args.seed)
    answers = [adversarial_response(ex, rng) for ex in heldout for _ in range(2)]
    for path in args.judges:
        tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path).eval()
        with torch.no_grad():
            _, verdicts = judge_all(model, tokenizer, answers)
        agree, total = Counter(), Counter()
        for verdict, answer in zip(verdicts, answers):
            total[answer.kind] += 1
            agree[answer.kind] += verdict is not None and round(verdict) == answer.label
        share = sum(agree.values()) / len(answers)
        print(f"{path}: {share:.4f} of {len(answers)}")
        print("  " + ", ".join(f"{kind} {agree[kind]}/{total[kind]}" for kind in sorted(total)))


if __name__ == "__main__":
    main()
