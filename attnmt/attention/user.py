"""Deprecated since 0.3.1, removed in 0.4: ``attnmt.attention.user`` was split in three.

- ``attnmt.attention.user_code``: naming a user's mechanism and importing its code;
- ``attnmt.attention.user_adapter``: the contract, the adapter and what contains its faults;
- ``attnmt.attention.provenance``: what a run keeps of the code, and the gate when it is loaded.

``register_attention`` is also on ``attnmt.attention``. Importing this module still works and warns.
"""

import warnings

from attnmt.attention.provenance import *  # noqa: F403 (this old path gives the new modules' public names)
from attnmt.attention.provenance import __all__ as _provenance
from attnmt.attention.user_adapter import *  # noqa: F403
from attnmt.attention.user_adapter import __all__ as _adapter
from attnmt.attention.user_code import *  # noqa: F403
from attnmt.attention.user_code import __all__ as _code

__all__ = [*_code, *_adapter, *_provenance]  # pyright: ignore[reportUnsupportedDunderAll]

warnings.warn("attnmt.attention.user is deprecated; import from attnmt.attention.user_code, .user_adapter or "
              ".provenance (register_attention: attnmt.attention)", DeprecationWarning, stacklevel=2)
