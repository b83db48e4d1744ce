"""Deprecated since 0.2.0, removed in 0.3: ``attnmt.translator`` is now ``attnmt.decoding.translator``.

Its public names are also on the package itself (``attnmt.Translator``). Importing this module
still works and warns once.
"""

import warnings

from attnmt.decoding.translator import *  # noqa: F403 (this old path gives the new module's public names)
from attnmt.decoding.translator import __all__  # noqa: F401 (the same names for a star import of the old path)

warnings.warn("attnmt.translator is deprecated; import from attnmt (e.g. attnmt.Translator) or "
              "attnmt.decoding.translator", DeprecationWarning, stacklevel=2)
