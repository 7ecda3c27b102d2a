"""Where the harness keeps what it builds: converted weights, trained drafters, downloaded data.

Light on purpose (no torch): the question loader and the report need it too.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UsageError


def model_slug(name: str) -> str:
    """A model name as a file-name part (trained drafters and searches are cached per model)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, fsync, then rename: a reader (or an
    interrupted run) sees the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def cache_root() -> Path:
    """$SPECHARNESS_CACHE, else ~/.cache/specharness; one line when it cannot be a folder (it would
    surface later as a model or kernel that cannot be loaded)."""
    given = os.environ.get("SPECHARNESS_CACHE")
    root = Path(given or Path.home() / ".cache" / "specharness")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = f"$SPECHARNESS_CACHE '{given}'" if given else f"the cache folder '{root}'"
        raise UsageError(f"{where} cannot be a folder ({exc.strerror or exc}); point $SPECHARNESS_CACHE at a "
                         "writable folder") from None
    return root
