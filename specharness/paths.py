"""Where the harness keeps what it builds: converted weights, trained drafters, downloaded data.

Light on purpose (no torch): the question loader and the report need it too.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$SPECHARNESS_CACHE, else ~/.cache/specharness."""
    return Path(os.environ.get("SPECHARNESS_CACHE", Path.home() / ".cache" / "specharness"))
