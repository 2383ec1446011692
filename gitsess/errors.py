"""The one exception type that means "the user asked for something that cannot be done".

The CLI prints its message as a single line and exits 1; anything else that escapes is a bug.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class GitsessError(Exception):
    """A failure with a message fit to show the user as is; `exit_code` is the CLI's status
    (1, but a shell's 126 and 127 for a command that cannot run)."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# The front end's spelling of an option that a message asks for; None: the command line's.
_TOOL_ARGUMENTS: ContextVar[bool] = ContextVar("gitsess_tool_arguments", default=False)


def option(name: str, metavar: str = "") -> str:
    """An option a message asks the user to give, as the front end in use spells it: `--name
    METAVAR` on the command line, `name` for a caller of the MCP tools (`tool_arguments`). The
    services share one message for both, and never spell a command line flag themselves."""
    if _TOOL_ARGUMENTS.get():
        return f"the {name.replace('-', '_')} argument"
    return f"--{name} {metavar}" if metavar else f"--{name}"


@contextmanager
def tool_arguments() -> Iterator[None]:
    """Within, `option` spells options as the MCP tools' arguments."""
    token = _TOOL_ARGUMENTS.set(True)
    try:
        yield
    finally:
        _TOOL_ARGUMENTS.reset(token)
