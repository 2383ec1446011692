"""The one exception type that means "the user asked for something that cannot be done".

The CLI prints its message as a single line and exits 1; anything else that escapes is a bug.
"""


class GitsessError(Exception):
    """A failure with a message fit to show the user as is; `exit_code` is the CLI's status
    (1, but a shell's 126 and 127 for a command that cannot run)."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
