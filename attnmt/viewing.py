"""Deprecated since 0.2.0, removed in 0.3: ``attnmt.viewing`` is now ``attnmt.visual.examples``.

Its public names are also on the package itself (``attnmt.view_examples``). Importing this module
still works and warns once.
"""

import warnings

from attnmt.visual.examples import *  # noqa: F403 (this old path gives the new module's public names)
from attnmt.visual.examples import __all__  # noqa: F401 (the same names for a star import of the old path)

warnings.warn("attnmt.viewing is deprecated; import from attnmt (e.g. attnmt.view_examples) or "
              "attnmt.visual.examples", DeprecationWarning, stacklevel=2)
