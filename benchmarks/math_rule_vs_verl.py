"""The MATH rule (rlrm/engine/math_answer.py) against verl's own, score for score.

    python benchmarks/math_rule_vs_verl.py --verl PATH/verl/utils/reward_score/math_reward.py

verl's file is the user's copy (not shipped with rlrm): it needs nothing but Python. Every pair of 56 answer spellings
(fractions written five ways, roots, intervals, units, degrees, percents, `x =`, matrices, text answers, ...) is
scored as a response in each of 8 shapes (a sentence, a bare box, two boxes, `\\boxed 5`, `\\fbox`, no box, a
`\\boxed 0` before the box) against each spelling as the ground truth, by both rules. Prints how many scores are
equal and the pairs that differ, grouped by why.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import itertools
from collections import Counter

from rlrm.engine import math_answer

ANSWERS = [
    "5", "-3", "0", "12", "\\frac{1}{2}", "\\frac{3}{4}", "\\dfrac{3}{4}", "\\tfrac34", "\\frac34", "3/4", "0.5", ".5",
    "\\sqrt{2}", "2\\sqrt{3}", "\\sqrt2", "\\sqrt 2", "(1, 2)", "\\left(1,2\\right)", "[0, 1)", "x = 3", "k=7",
    "90^\\circ", "90^{\\circ}", "\\$5", "10\\text{ cm}", "10 \\text{ cm}", "50\\%", "50%", "\\pi", "2\\pi",
    "\\frac{\\sqrt{3}}{2}", "1,\\!000", "1000", "1{,}000", "\\infty", "x^2+1", "x^2 + 1", "\\{1,2\\}", "\\text{(A)}",
    "A", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "y=2x+1", "2x+1", "0.25", "\\frac14", "\\frac{2}{4}", "1.0", "1",
    "\\frac{1}{2}\\text{ m}", "-\\frac{1}{2}", "\\frac{-1}{2}", "\\text{Monday}", "Monday", "5\\text{ and }6",
    "2\\text{ m by }3\\text{ m}", "2\\text{ m by }7\\text{ m}",
]  # fmt: skip
SHAPES = [
    "The answer is $\\boxed{%s}$.", "\\boxed{%s}", "so \\boxed{%s}", "$\\boxed %s$", "\\fbox{%s}",
    "first \\boxed{0} then \\boxed{%s}", "%s", "$\\boxed 0$, then \\boxed{%s}",
]  # fmt: skip


def _why(response: str, truth: str) -> str:
    if response.startswith("$\\boxed 0$, then"):
        return "the last box is the answer (verl takes a \\boxed 0 anywhere over a later \\boxed{...})"
    if "\\fbox" in response:
        return "an \\fbox answer (verl finds it, then scores 0)"
    if "\\sqrt " in response or "\\sqrt " in truth:
        return "\\sqrt 2 read as \\sqrt{2}"
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verl", required=True, help="path to verl's verl/utils/reward_score/math_reward.py")
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("verl_math_reward", args.verl)
    assert spec is not None and spec.loader is not None
    verl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(verl)
    equal, differ = 0, Counter()
    for answer, truth, shape in itertools.product(ANSWERS, ANSWERS, SHAPES):
        response = shape % answer
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # verl prints what it could not read
                theirs = float(verl.compute_score(response, truth))
        except Exception:  # noqa: BLE001 - verl's own failure scores 0 in its loop
            theirs = 0.0
        ours = math_answer.compute_score(response, truth)
        if theirs == ours:
            equal += 1
        else:
            differ[_why(response, truth)] += 1
    total = equal + sum(differ.values())
    print(f"{equal:,} of {total:,} scores equal ({equal / total:.4f})")
    for why, count in differ.most_common():
        print(f"  {count:,} differ: {why}")


if __name__ == "__main__":
    main()
