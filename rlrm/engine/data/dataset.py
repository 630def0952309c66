"""Train and test splits for a profile's `data` section."""

from __future__ import annotations

from rlrm.config.schema import DataConfig
from rlrm.engine.data.example import Example


def load_splits(cfg: DataConfig) -> tuple[list[Example], list[Example], dict]:
    """(train, test, info) where info counts skipped rows per split."""
    if cfg.source == "synthetic":
        from rlrm.engine.data.synthetic import synthetic_splits

        train, test = synthetic_splits(cfg.synthetic, cfg.prompt_suffix)
        return train, test, {"skipped_train": 0, "skipped_test": 0}
    from rlrm.engine.data.gsm8k import load_gsm8k

    train, skipped_train = load_gsm8k(cfg.path, cfg.train_split, cfg.prompt_suffix, cfg.skip_bad_rows)
    test, skipped_test = load_gsm8k(cfg.path, cfg.test_split, cfg.prompt_suffix, cfg.skip_bad_rows)
    return train, test, {"skipped_train": skipped_train, "skipped_test": skipped_test}
