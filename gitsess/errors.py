"""The one exception type that means "the user asked for something that cannot be done".

The CLI prints its message as a single line and exits 1; anything else that escapes is a bug.
"""


class GitsessError(Exception):
    """A failure with a message fit to show the user as is."""
