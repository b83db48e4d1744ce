"""Deprecated since 0.2.0, removed in 0.3: ``attnmt.notebook`` is now ``attnmt.visual.notebook``.

Its public names are also on the package itself (``attnmt.show``). Importing this module
still works and warns once.
"""

import warnings

from attnmt.visual.notebook import *  # noqa: F403 (this old path gives the new module's public names)
from attnmt.visual.notebook import __all__  # noqa: F401 (the same names for a star import of the old path)

warnings.warn("attnmt.notebook is deprecated; import from attnmt (e.g. attnmt.show) or "
              "attnmt.visual.notebook", DeprecationWarning, stacklevel=2)
