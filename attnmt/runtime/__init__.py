"""The runtime: what every layer may use, and nothing above it.

- ``device``: device names (auto, cpu, cuda, cuda:N, mps), resolved once and described in one line.
- ``precision``: fp32, bf16, fp16: one check, one autocast, one loss scaler.
- ``atomic_files``: writing a file so that a reader never sees half of it.
- ``tables``: the one table formatter of the terminal and the reports.
- ``checks``: is a value an integer, a finite number; a config dataclass from a mapping.
- ``choices``: the choice lists the command line offers, importable without torch or NumPy.
- ``lazy``: a package's public names, imported when first used.
- ``renames``: the names of an older version (config keys, parameters) that still work, with a warning.

This ``__init__`` imports nothing, so that ``attnmt.runtime.choices`` stays light.
"""
