"""gitsess: named, resumable, copy-on-write sessions over a git worktree."""

__version__ = "0.1.0"
