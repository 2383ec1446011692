"""The settings of a run (`Config`), the three targets and the consoles every module prints to."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

console = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 150)

NATIVE = "native"
OVERLAYFS = "fuse-overlayfs"
GITSESS = "gitsess"
TARGETS = (NATIVE, OVERLAYFS, GITSESS)
MIB = 1024 * 1024
GITSESS_CLI = str(Path(sys.executable).parent / "gitsess")

Step = Callable[[], None]


# ---------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Config:
    quick: bool
    runs: int  # per figure
    slow_runs: int  # for the workloads that take seconds per run
    big_mib: int  # the file outside git
    write_mib: int  # sequential write + fsync
    creation_runs: int
    apply_runs: int  # diff / apply --commit, which swing most from run to run
    small_files: int = 5000
    dirs: int = 400
    corpus_mib: int = 50
    create_files: int = 2000
    bulk_files: int = 2000  # the lower directory `rm -rf` removes
    wide_files: int = 50_000  # the second repository for session creation
    fleet_sessions: int = 50  # sessions mounted at once for their memory
    changed_files: int = 1000  # diff / apply --commit
    extra: bool = False  # also the workloads beyond issue 8's list

    @staticmethod
    def make(quick: bool, runs: int | None, extra: bool = False) -> Config:
        if quick:
            return Config(
                True, runs or 3, runs or 1, big_mib=64, write_mib=64, creation_runs=1,
                apply_runs=1, extra=extra,
            )  # fmt: skip
        return Config(
            False, runs or 9, runs or 5, big_mib=500, write_mib=500, creation_runs=3,
            apply_runs=runs or 5, extra=extra,
        )  # fmt: skip
