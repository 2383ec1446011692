"""The audit log: who changed what through the mount, batched into the tree's commits.

Events are held in memory and written in the same transaction as the changes they describe.
Each writing process is described once (name and command line from /proc), and attributed to
the participant (role, run) whose process tree it belongs to.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Attribution:
    role: str | None
    run_id: int | None


@dataclass
class Audit:
    participants: dict[int, Attribution] = field(default_factory=dict)  # keyed by pid
    events: list[tuple[object, ...]] = field(default_factory=list)
    new_processes: list[tuple[int, int, str, str]] = field(default_factory=list)
    _process_ids: dict[int, int] = field(default_factory=dict)
    # the daemon's number of a process -> the number it knows itself by (`_own_pid`)
    _own_pids: dict[int, int] = field(default_factory=dict)
    _owners: dict[int, Attribution | None] = field(default_factory=dict)
    # (inode, pid) -> index in `events` of the write record that process's writes add to.
    _writes: dict[tuple[int, int], int] = field(default_factory=dict)
    next_process_id: int = 1

    def record(
        self,
        op: str,
        path: bytes,
        pid: int,
        *,
        target: bytes | None = None,
        nbytes: int | None = None,
    ) -> None:
        # Writes after this are new records: the log reads in order (a write, a rename, a
        # write to the new name).
        self._writes.clear()
        self._append(op, path, pid, target, nbytes)

    def _append(
        self, op: str, path: bytes, pid: int, target: bytes | None, nbytes: int | None
    ) -> None:
        owner = self.owner(pid)
        process = self._process(pid)
        self.events.append(
            (
                time.time_ns(),
                op,
                os.fsdecode(path),
                None if target is None else os.fsdecode(target),
                nbytes,
                self._own_pids.get(pid) if pid else None,
                process,
                owner.role if owner else None,
                owner.run_id if owner else None,
            )
        )

    def add_write(self, ino: int, pid: int, nbytes: int) -> bool:
        """Add a write of `nbytes` to file `ino` by process `pid` to the record of the run of
        writes it continues (by the same process, with no other event since, in this commit):
        False when there is none, and `record_write` is to begin one. WRITE requests are all
        there is to go by: without OPEN requests nothing says when a writer is done."""
        index = self._writes.get((ino, pid))
        if index is None:
            return False
        e = self.events[index]
        total = e[4]
        assert isinstance(total, int)
        self.events[index] = (*e[:4], total + nbytes, *e[5:])
        return True

    def record_write(self, ino: int, path: bytes, pid: int, nbytes: int) -> None:
        """Begin the record of a run of writes (with the writer's run and the file's path now),
        which `add_write` adds the rest to."""
        self._writes[(ino, pid)] = len(self.events)
        self._append("write", path, pid, None, nbytes)

    def drain(self) -> tuple[list[tuple[int, int, str, str]], list[tuple[object, ...]]]:
        out = self.new_processes, self.events
        self.new_processes, self.events = [], []
        self._writes.clear()
        return out

    def forget_participants(self) -> None:
        """Participants changed: who owns which process must be worked out again."""
        self._owners.clear()

    def _process(self, pid: int) -> int | None:
        if not pid:
            return None
        known = self._process_ids.get(pid)
        if known is not None:
            return known
        name, cmdline = _describe(pid)
        ident = self.next_process_id
        self.next_process_id += 1
        self._process_ids[pid] = ident
        own = self._own_pids[pid] = _own_pid(pid)
        self.new_processes.append((ident, own, name, cmdline))
        return ident

    def owner(self, pid: int) -> Attribution | None:
        """The participant whose process `pid` is, or descends from."""
        if pid in self._owners:
            return self._owners[pid]
        owner = None
        current, hops = pid, 0
        while current > 1 and hops < 64:
            if current in self.participants:
                owner = self.participants[current]
                break
            current = _parent(current)
            hops += 1
        self._owners[pid] = owner
        return owner


def _describe(pid: int) -> tuple[str, str]:
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            name = f.read().strip().decode(errors="replace")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().rstrip(b"\0").split(b"\0")
        return name, " ".join(a.decode(errors="replace") for a in args)
    except OSError:
        return "?", ""


def _own_pid(pid: int) -> int:
    """The number the process knows itself by (`$$`): a run's processes live in a PID namespace
    of their own, where the daemon's number for them means nothing."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return pid


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0
    # The command name may hold spaces and parentheses: fields follow the last ")".
    return int(stat[stat.rindex(b")") + 2 :].split()[1])
