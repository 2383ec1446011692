"""The refresh watcher of one running participant (started by `participants.prepare`).

`python -m gitsess.services.agents.refresher COMMON_DIR STATE_DIR SEED...` watches the directories
holding the participant's seeds and sweeps every root of the repository when a seed has become a
regular file, so that a token one agent refreshed reaches the others while they run. The watch
is not recursive: a linked directory among the seeds (a `plugins/`) would lead it into the
shared originals. It stops on SIGTERM (between sweeps, never inside one; `finish` sends it),
and when its stdin, a pipe from `gitsess run`, closes: it never outlives its participant.
"""

from __future__ import annotations

import signal
import stat
import sys
import threading
import traceback
from pathlib import Path

import watchfiles

from gitsess.git.repo import RepoContext
from gitsess.services.agents.participants import refresh

# Long enough to see a CLI's write-then-rename as one change, short enough to beat its next read.
DEBOUNCE_MS = 200
# Also look every so often: a refresh made before the watch was set up sends no event.
RECHECK_MS = 1000


def _replaced(seed: Path) -> bool:
    try:
        return stat.S_ISREG(seed.lstat().st_mode)
    except FileNotFoundError:
        return False


def main(argv: list[str]) -> int:
    common_dir, state_dir, *seed_args = argv
    ctx = RepoContext(Path(common_dir), Path(state_dir), None)
    seeds = [Path(s) for s in seed_args]
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.buffer.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda _signo, _frame: stop.set())
    for _ in watchfiles.watch(
        *sorted({str(s.parent) for s in seeds}),
        watch_filter=None,
        debounce=DEBOUNCE_MS,
        stop_event=stop,
        rust_timeout=RECHECK_MS,
        yield_on_timeout=True,
        recursive=False,
        raise_interrupt=False,
    ):
        if any(_replaced(s) for s in seeds):
            try:
                refresh(ctx)
            except Exception:
                # The exit-time sweep catches up; the log says what went wrong here.
                traceback.print_exc()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
