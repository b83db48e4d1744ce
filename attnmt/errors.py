"""The exceptions a user can cause. The CLI prints their message without a traceback."""


class AttnmtError(Exception):
    """Base class of every error attnmt raises on purpose for bad user input."""


class DataError(AttnmtError):
    """A data file is missing, unreadable, malformed, or inconsistent with its pair."""


class ConfigError(AttnmtError):
    """A configuration file or option has an unknown key or an invalid value."""


class CheckpointError(AttnmtError):
    """A checkpoint is missing, corrupt, or was made by another kind of model."""


class OutputError(AttnmtError):
    """A file could not be written (a full disk, no permission); the previous version is intact."""
