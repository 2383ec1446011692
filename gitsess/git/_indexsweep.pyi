# Stubs of gitsess/git/_indexsweep.c: git's index entries checked against a worktree, in C.

def entries_end(data: bytes, /) -> int | None: ...
def paths(data: bytes, /) -> list[bytes] | None: ...
def sweep(
    data: bytes,
    worktree: bytes,
    racy_from: int,
    dirs: list[tuple[bytes, tuple[int, ...]]],
    threads: int,
    /,
) -> tuple[list[bytes], list[int]] | None: ...
