"""Whether the daemon's view is still there: its mount in the mount table, its delta.db in the
session dir.

A lazy unmount (`fusermount3 -uz`) takes the view out of the mount table, but the kernel keeps
the FUSE connection while anything still holds a file or a working directory in it, and the
daemon waited for requests that never came, for good. A session dir deleted under a live daemon
left it writing to a delta.db no one could open again. After a day of scripted use, seven such
daemons (with their watch processes) were found still running. The daemon asks this every
`INTERVAL` seconds, and stops when the answer is no (see `daemon._watch_presence`).

Read from the mount table, not by asking the mount point (see `mounttable`).
"""

from __future__ import annotations

import os

from gitsess.overlay import mounttable

# How often the daemon looks: a stray goes within seconds, and the look costs one read of the
# mount table and one stat.
INTERVAL = 1.0


class Presence:
    def __init__(self, mountpoint: str, delta: str) -> None:
        self.mountpoint = mountpoint
        # None when the mount is not found by this name (a path through a symlink): then only
        # delta.db is looked at.
        self.device = mounttable.device_at(mountpoint)
        self.delta = delta
        st = os.stat(delta)
        self._delta = (st.st_dev, st.st_ino)

    def unmounted(self) -> bool:
        """The view is no longer in the mount table (or another mount took its place)."""
        return self.device is not None and mounttable.device_at(self.mountpoint) != self.device

    def deleted(self) -> bool:
        """delta.db is gone from its place, or another file took it (its session dir was
        deleted, and perhaps made again)."""
        try:
            st = os.stat(self.delta)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return (st.st_dev, st.st_ino) != self._delta
