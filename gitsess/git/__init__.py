"""Everything gitsess does with git, through pygit2 (never by running the git program)."""
