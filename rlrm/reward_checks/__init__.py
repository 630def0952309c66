"""Checks of a reward setup before training on it: `rlrm inspect reward` and `rlrm eval rm`."""
