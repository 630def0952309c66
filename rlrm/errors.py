"""Errors a user can act on. The CLI prints them as one line (RLRM_DEBUG=1 shows the traceback)."""


class RlrmError(Exception):
    """Base of every error rlrm reports to a user as one clear line."""


class ConfigError(RlrmError):
    """A profile, override or flag is invalid."""


class DataError(RlrmError):
    """A dataset is missing, malformed or has unusable rows."""


class ModelError(RlrmError):
    """A model path is missing or a checkpoint cannot be loaded."""


class RunFolderError(RlrmError):
    """An output folder cannot be used as asked (holds another run, is not a run, ...)."""


class TrainingError(RlrmError):
    """Training cannot go on (e.g. too many non-finite losses in a row)."""


class RolloutServerError(RlrmError):
    """Rollout servers cannot generate or take new weights (named replica, and what to do)."""
