"""Train and test splits for a profile's `data` section."""

from __future__ import annotations

from rlrm.config.schema import DataConfig
from rlrm.engine.data.example import Example
from rlrm.engine.data.rows import load_rows, split_source
from rlrm.engine.data.synthetic import synthetic_splits
from rlrm.errors import DataError


def load_splits(cfg: DataConfig) -> tuple[list[Example], list[Example], dict]:
    """(train, test, info) where info counts skipped rows per split.

    Raises:
        DataError: unreadable data, a bad row (unless `skip_bad_rows`), or train and test
            splits that resolve to the same file or hub split.
    """
    if cfg.source == "synthetic":
        train, test = synthetic_splits(cfg.synthetic, cfg.prompt_suffix)
        return train, test, {"skipped_train": 0, "skipped_test": 0}

    train_source, test_source = split_source(cfg.path, cfg.train_split), split_source(cfg.path, cfg.test_split)
    if train_source == test_source:
        # Validation on the rows training learns from would report memorisation as accuracy.
        raise DataError(
            f"data.train_split and data.test_split both read {train_source}, so validation would score the rows training "
            "learns from; point data.path at a folder holding train and test files, or set data.train_split and "
            "data.test_split to two different files"
        )
    train, skipped_train = load_rows(cfg.path, cfg.train_split, cfg.prompt_suffix, cfg.skip_bad_rows, cfg.source)
    test, skipped_test = load_rows(cfg.path, cfg.test_split, cfg.prompt_suffix, cfg.skip_bad_rows, cfg.source)
    return train, test, {"skipped_train": skipped_train, "skipped_test": skipped_test}
