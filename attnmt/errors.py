"""The exceptions a user can cause. The CLI prints their message without a traceback."""


class AttnmtError(Exception):
    """Base class of every error attnmt raises on purpose for bad user input."""


class DataError(AttnmtError):
    """A data file is missing, unreadable, malformed, or inconsistent with its pair."""


class ConfigError(AttnmtError):
    """A configuration file or option has an unknown key or an invalid value."""


class ConfigMismatch(ConfigError):
    """A run is continued with another config than it was started with; ``differences`` lists the
    dotted keys, each as "key (value in the run, value now)"."""

    def __init__(self, message: str, differences: list[str]):
        super().__init__(message)
        self.differences = differences


class CheckpointError(AttnmtError):
    """A checkpoint is missing, corrupt, or was made by another kind of model."""


class OutputError(AttnmtError):
    """A file could not be written (a full disk, no permission); the previous version is intact."""


class TrainingDiverged(AttnmtError):
    """A training's loss or weights stopped being finite; it stopped, keeping its last good checkpoint."""
