"""The version of attnmt (read by the package, the checkpoints it writes, and the build)."""

__version__ = "0.3.1"
