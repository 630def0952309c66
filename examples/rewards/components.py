"""A reward with named components: correctness and format, trained GDPO-style (each normalised within its group).

    algorithm:
      component_norm: gdpo                 # none (default): GRPO on the score
    reward:
      kind: custom
      custom: {path: examples/rewards/components.py, name: compute_score}
      component_weights: {correct: 1.0, format: 0.2}

    rlrm train --profile tiny-rule --set reward.kind=custom \
      --set reward.custom.path=examples/rewards/components.py \
      --set "reward.component_weights={correct: 1.0, format: 0.2}" --set algorithm.component_norm=gdpo

`correct` is 1 when the final `#### N` answer is the ground truth; `format` is 1 when the response ends with its
answer line (`#### N` and nothing after it). With `component_norm: gdpo` a group where every answer is wrong but
some are well formed still teaches the format at its own scale (0.2 here), and a group where all are well formed
teaches correctness at full strength, instead of both being folded into one normalised sum (rlrm/engine/gdpo.py).
Each component is logged as `reward/component/<name>/{mean,min,max}` and its agreement with the rule as
`reward/component/<name>/rule_agreement`.
"""

from __future__ import annotations

import re

from rlrm.engine.rewards.gsm8k import extract_solution

FORMAT_WEIGHT = 0.2  # the score this function reports is the same weighted sum as the profile's weights
_ENDS_WITH_ANSWER = re.compile(r"#### -?[0-9.,]+\s*$")


def compute_score(data_source, solution_str, ground_truth, extra_info):
    correct = float(extract_solution(solution_str) == ground_truth)
    well_formed = float(_ENDS_WITH_ANSWER.search(solution_str) is not None)
    return {
        "score": correct + FORMAT_WEIGHT * well_formed,  # what GRPO trains on with component_norm: none
        "reward_components": {"correct": correct, "format": well_formed},
    }
