"""The refresh watcher of one running participant (started by `participants.prepare`).

`python -m gitsess.agents.watch COMMON_DIR STATE_DIR SEED...` watches the directories holding the
participant's seeds and sweeps every root of the repository when a seed changes, so that a token
one agent refreshed reaches the others while they run. It exits when its stdin closes.
"""

from __future__ import annotations

import sys
import threading
import traceback
from pathlib import Path

import watchfiles

from gitsess.agents.participants import refresh
from gitsess.git.repo import RepoContext

# Long enough to see a CLI's write-then-rename as one change, short enough to beat its next read.
DEBOUNCE_MS = 200


def main(argv: list[str]) -> int:
    common_dir, state_dir, *seeds = argv
    ctx = RepoContext(Path(common_dir), Path(state_dir), None)
    watched = {str(Path(s)) for s in seeds}
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.buffer.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    for changes in watchfiles.watch(
        *sorted({str(Path(s).parent) for s in seeds}),
        watch_filter=None,
        debounce=DEBOUNCE_MS,
        stop_event=stop,
        recursive=False,
        raise_interrupt=False,
    ):
        if any(path in watched for _, path in changes):
            try:
                refresh(ctx)
            except Exception:
                # The exit-time sweep catches up; the log says what went wrong here.
                traceback.print_exc()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
