"""One exception type for everything a user can get wrong.

The CLI turns it into a single line on stderr and exit code 2; no traceback reaches the user.
"""


class UsageError(Exception):
    """A bad input: the message names the problem and says what to do instead."""
