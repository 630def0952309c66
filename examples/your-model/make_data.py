"""Write a small dataset in verl's parquet shape (data/train.parquet, data/test.parquet) and put a model folder at
my-model/ (a copy of the tiny policy), so my-profile.yaml runs as your own model and data would.

    python make_data.py            # then: rlrm train --profile my-profile.yaml
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUFFIX = 'Let\'s think step by step and output the final answer after "####".'


def rows(n: int, split: str, rng: random.Random) -> list[dict]:
    out = []
    for i in range(n):
        a, b = rng.randint(1, 30), rng.randint(1, 30)
        out.append(
            {
                "data_source": "my_arith",
                "prompt": [
                    {
                        "role": "user",
                        "content": f"Tom has {a} apples and buys {b} more. How many apples does he have? {SUFFIX}",
                    }
                ],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"split": split, "index": i},
            }
        )
    return out


def main() -> None:
    import pandas as pd

    from rlrm.engine.models.tiny import resolve_model_path

    rng = random.Random(0)
    (HERE / "data").mkdir(exist_ok=True)
    pd.DataFrame(rows(256, "train", rng)).to_parquet(HERE / "data" / "train.parquet")
    pd.DataFrame(rows(64, "test", rng)).to_parquet(HERE / "data" / "test.parquet")
    if not (HERE / "my-model").exists():
        shutil.copytree(resolve_model_path("tiny:policy"), HERE / "my-model")
    print(f"wrote {HERE / 'data'} (256 train, 64 test rows) and {HERE / 'my-model'}")


if __name__ == "__main__":
    main()
