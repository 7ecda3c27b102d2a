"""One exception type for everything a user can get wrong.

The CLI turns it into a single line on stderr and exit code 2; no traceback reaches the user.
"""


class UsageError(Exception):
    """A bad input: the message names the problem and says what to do instead."""


def exception_line(exc: BaseException, limit: int = 160) -> str:
    """An exception as one line for a note ('Type: first line of its message'), where the harness
    falls back instead of failing (a compile that cannot run, a kernel that cannot build)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:limit] if text else ''}"
