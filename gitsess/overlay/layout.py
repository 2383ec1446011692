"""What a session dir holds, by name: the one place that spells its layout.

Services reach these through `services/handle.SessionHandle`; the runtime and the overlay,
which sit below the services, import the names from here.
"""

from __future__ import annotations

from pathlib import Path

DELTA = "delta.db"  # the upper layer's metadata (`overlay/schema.py`)
DATA = "data"  # the upper layer's file contents, beside DELTA (`schema.data_dir`)
CHECKPOINTS = "checkpoints"  # data files that checkpoints saved, by epoch (`usage.cp_root`)
APPLY_JOURNAL = "apply-journal.json"  # an apply under way (`services/apply_journal.py`)
APPLY_LOCK = "apply.lock"  # one apply, discard or reconcile at a time
DAEMON_LOG = "daemon.log"
GIT_COUNTS = "git-counts.json"  # the last count of the session's own commits (`services/counts.py`)
MOUNTPOINT = "mnt"  # where the view is mounted when no other place is asked for
OBJECTS = "objects"  # the session's git object store (`overlay/objectdir.py`)
KEPT = "kept"  # object files checkpoints keep, links of the store's (`objectdir.keep`)


def delta(session_dir: Path) -> Path:
    return session_dir / DELTA
