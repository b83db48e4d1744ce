"""Deprecated since 0.2.0, removed in 0.3: ``attnmt.config`` is now ``attnmt.runs.run_config``.

Its public names are also on the package itself (``attnmt.load_config``). Importing this module
still works and warns once.
"""

import warnings

from attnmt.runs.run_config import *  # noqa: F403 (this old path gives the new module's public names)
from attnmt.runs.run_config import __all__  # noqa: F401 (the same names for a star import of the old path)

warnings.warn("attnmt.config is deprecated; import from attnmt (e.g. attnmt.load_config) or "
              "attnmt.runs.run_config", DeprecationWarning, stacklevel=2)
