"""One exception type for everything a user can get wrong.

The CLI turns it into a single line on stderr and exit code 2; no traceback reaches the user.
"""

from __future__ import annotations

import os
import tempfile
import traceback
from contextlib import contextmanager
from pathlib import Path


class UsageError(Exception):
    """A bad input: the message names the problem and says what to do instead."""


def exception_line(exc: BaseException, limit: int = 160) -> str:
    """An exception as one line for a note ('Type: first line of its message'), where the harness
    falls back instead of failing (a compile that cannot run, a kernel that cannot build)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:limit] if text else ''}"


class CodeFailed(UsageError):
    """Code the harness calls (a method's drafter or factory, a plugin's hook) raised: one line
    saying whose code and what, with the traceback kept in a file for whoever fixes that code."""

    def __init__(self, what: str, exc: BaseException) -> None:
        path = Path(tempfile.gettempdir()) / f"specharness-traceback-{os.getpid()}.txt"
        try:
            path.write_text("".join(traceback.format_exception(exc)))
            kept = f"traceback in {path}"
        except OSError:
            kept = "no traceback file: the temp folder is not writable"
        super().__init__(f"{what} raised {exception_line(exc)} ({kept})")


@contextmanager
def blamed_on(what: str):
    """Run code the harness calls but does not own (a method, a plugin's hook) so that its crash is
    one line naming ``what``; a user error or Ctrl-C inside passes through unchanged."""
    try:
        yield
    except (UsageError, KeyboardInterrupt):
        raise
    except Exception as exc:
        raise CodeFailed(what, exc) from exc
