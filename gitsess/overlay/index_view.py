"""The session's first index: the real one, shown with an fsmonitor extension of the session's.

While the view's `.git/index` follows the real one (`gitunit.py`), it is shown with an
fsmonitor extension whose token (`token_for`) names the real index file, so that a `git status`
inside asks the session's fsmonitor hook instead of looking up every file through FUSE (a
LOOKUP round trip each: 14x native on a new session). The daemon answers that token (`changed`)
from what it knows without FUSE: every path the session itself changed, and every entry whose
worktree file no longer matches the entry's stat data (an `lstat` of the worktree, as git itself
would check it) or is racily clean. The untracked cache is kept, and a name is given in each of its
directories git must list again.

The untracked cache names the worktree git made it in ("Location <path>, system <kernel>"),
and git drops it anywhere else: an in-place run sees the view at the worktree's own path, a
mounted view is seen at its mount point. So the view has a variant of the index for each
(`_locations`), their idents padded with NULs (git compares the ident up to its first NUL),
and shows the one for where the opener stands: git chdirs to its worktree's top before it reads
the index, so the LOOKUP of `.git/index` tells by the opener's cwd (`/proc/<pid>/cwd`). The
kernel keeps one page cache for the file whoever reads it, so each variant has a size of its
own (a NUL more per variant), whose change has the kernel drop the cached pages, and an mtime
1 ns later per variant (`mtime_ns`; later is safe: git finds more entries racily clean, not
fewer); and the variant is held for `HOLD` seconds after each LOOKUP of the file, so that a reader
still mapping one variant never gets pages of the other (a checksum failure). An opener from
the other location meanwhile gets the held variant, and git drops the cache: slower, not wrong.

The worktree part of that answer (`_worktree_dirty`: an `lstat` of every entry, 5,001 on the
bench's corpus, in C threads that hold no GIL: in Python it took 20-40 ms of the GIL the thread
serving git's requests needs) is swept ahead, in a thread, as soon as the lower watch is in place
(`daemon_fsmonitor.sweep_ahead`) or git first reads the index: the sweep first marks where the
watch's journal stands (`mark`, which waits for the watch in place, then syncs with it), so
what changes during or after it is in the journal after the mark, and the query answers the
sweep plus the journal since the mark.
A mark from another connection of the watch (changes may have gone unreported between two),
a journal that dropped the mark, or a sweep not done in time: the query sweeps again.

The session's own index after a remount (`remounted`): its token names an old daemon's
journal, which no one can answer for. But the view shows a worktree file with the worktree's
own `lstat` (its inode number too, unless taken), so the same sweep answers for that index,
given the index git read: while the session's `.git/index` is still the one the view was
mounted with (`note_mounted`: its node, size and mtime), every git that read it read that one,
and a token in it is answered by sweeping it. Once replaced (by a git inside, which writes the
token this daemon gave it, or by one that asked nothing and kept the old token), a token of an
old journal gets "everything" again.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gitsess.git import _indexsweep, indexfile
from gitsess.overlay import longpath
from gitsess.overlay.gitdir import in_git
from gitsess.overlay.nodes import ROOT_INODE, identity, join

if TYPE_CHECKING:
    from gitsess.overlay.tree import Tree

TOKEN_PREFIX = "gitsess-index:"
# A name no directory holds (git's own checks take it as a path), so naming it below a
# directory only makes git list that directory again.
UNLISTED = b".gitsess-unlisted"
# How long a variant of the index stays shown after a LOOKUP of it (see the module docstring):
# git reads the whole index right after opening it.
HOLD = 1.0
# Threads the sweep `lstat`s the worktree on (git's own preload runs up to 20).
SWEEP_THREADS = 4


# What the lower watch had reported when a sweep started (see `IndexView.mark`).
Mark = tuple[int, str]
# Which index a sweep is of: the real one shown, the session's own one mounted with.
_REAL, _OWN = "real", "own"


@dataclass(frozen=True)
class _Shown:
    identity: tuple[int, int, int, int]  # the real index's ino, size, mtime_ns, ctime_ns
    index: indexfile.Index
    untracked: indexfile.Untracked | None  # kept in what is shown
    checksum: bytes  # the real index's own
    variants: tuple[bytes, ...]  # what is shown, for each of `IndexView._locations` (or one)
    token: str | None = None  # (the session's own index: the token in it)


@dataclass
class _Swept:
    """A sweep of the worktree against one real index (`IndexView._worktree_dirty`), started
    ahead of the query, and what the watch had reported when it started (None: no sweep, the
    watch was not in place)."""

    identity: tuple[int, int, int, int]
    done: threading.Event
    mark: Mark | None = None
    dirty: set[bytes] = field(default_factory=set)


def token_for(identity: tuple[int, int, int, int]) -> str:
    return TOKEN_PREFIX + ".".join(map(str, identity))


class IndexView:
    def __init__(self, real_index: bytes, worktree: bytes, mountpoint: bytes) -> None:
        self.real_index = real_index
        self.worktree = worktree
        # Where git may see the view: in place (an in-place run), at the mount point.
        self._locations = (os.path.realpath(worktree), os.path.realpath(mountpoint))
        self._made_in = b"Location " + self._locations[0] + b", system "
        self._shown: _Shown | None = None
        self._seen = 0  # the location whose variant is shown now
        self._held_until = 0.0
        # The session's own index as mounted: its node's ino, size, mtime, and its bytes;
        # parsed (`_own_index`) once git asks or the watch is in place (see `remounted`).
        self._own_mounted: tuple[tuple[int, int, int], bytes] | None = None
        self._own: _Shown | None = None
        # The sweeps started ahead: of the real index shown (`_REAL`), of the session's own
        # index as the view mounted with it (`_OWN`, see `remounted`).
        self._sweeps: dict[str, _Swept] = {}
        self._lock = threading.Lock()
        self._parsing = threading.Lock()
        # Where the lower watch stands once it reported every change made before the call
        # (waiting a moment for a watch being set up), None while it is not in place (set by
        # the daemon; called from a thread of its own).
        self.mark: Callable[[], Mark | None] = lambda: None

    def shown(self, opener: int | None = None) -> bytes | None:
        """What the view shows as `.git/index` while it follows the real one; None: the real
        file as it is (unreadable, changing while read, or a kind `indexfile` leaves alone).
        `opener`: the process looking the file up, whose location picks the variant shown."""
        # One parse at a time: the sweep ahead's thread and git's read may ask at once.
        with self._parsing:
            shown = self._read_shown()
        if shown is None:
            return None
        if opener is not None and len(shown.variants) > 1:
            self._choose(opener)
        return shown.variants[self._seen if len(shown.variants) > 1 else 0]

    def mtime_ns(self, real: int) -> int:
        """The mtime shown for the index, the real one's `real`: later by the variant's
        number, so that the kernel drops its pages of another variant."""
        shown = self._shown
        return real + self._seen if shown is not None and len(shown.variants) > 1 else real

    def _choose(self, opener: int) -> None:
        at = self._location_of(opener)
        now = time.monotonic()
        with self._lock:
            if at is not None and now >= self._held_until:
                self._seen = at
            self._held_until = now + HOLD

    def _location_of(self, pid: int) -> int | None:
        """Which of `_locations` the process stands in (its cwd: git's is its worktree's top)."""
        try:
            cwd = os.readlink(b"/proc/%d/cwd" % pid)
        except OSError:
            return None
        try:
            return self._locations.index(cwd)
        except ValueError:
            return None

    def _read_shown(self) -> _Shown | None:
        try:
            st = longpath.call(os.stat, self.real_index)
        except OSError:
            return None
        cached = self._shown
        if cached is not None and cached.identity == identity(st):
            return cached
        try:
            with open(self.real_index, "rb") as f:
                data = f.read()
                after = os.fstat(f.fileno())
        except OSError:
            return None
        if identity(after) != identity(st):
            return None
        index = indexfile.parse(data)
        if index is None:
            return None
        now = identity(st)
        token = token_for(now)
        cache = indexfile.untracked(index)
        # (git reads the ident up to its first NUL)
        made_in = cache.ident.split(b"\0")[0] if cache is not None else b""
        if cache is not None and made_in.startswith(self._made_in):
            system = made_in[len(self._made_in) :]
            idents = [b"Location " + at + b", system " + system for at in self._locations]
            # One more NUL for each variant: a size of its own has the kernel drop the pages of
            # another (it drops none on a new mtime alone: fs.py, `auto_inval_data`).
            width = max(map(len, idents))
            variants = tuple(
                indexfile.with_fsmonitor(index, token, (cache, ident.ljust(width + k, b"\0")))
                for k, ident in enumerate(idents)
            )
        else:
            cache = None
            variants = (indexfile.with_fsmonitor(index, token),)
        shown = _Shown(now, index, cache, data[-indexfile.HASH :], variants)
        self._shown = shown
        self._start_sweep(_REAL)
        return shown

    def as_shown(self, real: bytes) -> bytes:
        """The real index's bytes `real` as the view shows them now, if it does."""
        shown = self._shown
        if shown is not None and shown.checksum == real[-indexfile.HASH :]:
            return shown.variants[self._seen if len(shown.variants) > 1 else 0]
        return real

    def sweep_ahead(self) -> None:
        """Parses the real index now and starts its sweep (`_sweep`) in a thread, which
        waits for the lower watch to be in place (`mark`; the view just mounted: the first
        status then finds it done); of the session's own index instead, if the view mounted
        with one."""
        if self._own_mounted is not None:
            if self._own_index() is not None:
                self._start_sweep(_OWN)
        elif self.shown() is not None:
            self._start_sweep(_REAL)

    def _start_sweep(self, which: str) -> None:
        shown = self._shown if which == _REAL else self._own
        if shown is None:
            return
        with self._lock:
            swept = self._sweeps.get(which)
            if swept is not None and swept.identity == shown.identity:
                return
            swept = _Swept(shown.identity, threading.Event())
            self._sweeps[which] = swept
        threading.Thread(
            target=self._sweep, args=(which, shown, swept), daemon=True, name="gitsess-index-sweep"
        ).start()

    def _sweep(self, which: str, shown: _Shown, swept: _Swept) -> None:
        try:
            # Taken first: whatever changes while the sweep runs is after the mark. (Set on
            # `swept` once the sweep is done: a sweep that failed is never trusted.)
            mark = self.mark()
            if mark is not None:
                swept.dirty = self._worktree_dirty(shown)
                swept.mark = mark
            else:
                with self._lock:  # the watch not in place: the next start tries again
                    if self._sweeps.get(which) is swept:
                        del self._sweeps[which]
        finally:
            swept.done.set()

    def wait_swept(self, timeout: float, *, own: bool = False) -> None:
        """Until the sweep started ahead (of the real index, or with `own` of the session's
        own as mounted) is done, started now if none is (from a thread: it needs no event
        loop, and a sweep in the loop's thread would hold up the view)."""
        which = _OWN if own else _REAL
        if own:
            self._own_index()
        for _ in range(2):  # again if the one found started before the watch was in place
            self._start_sweep(which)
            swept = self._sweeps.get(which)
            if swept is None:
                return
            swept.done.wait(timeout)
            if swept.mark is not None:
                return

    def _swept_dirty(
        self, which: str, shown: _Shown, since: Callable[[Mark], list[bytes] | None]
    ) -> set[bytes] | None:
        """What the sweep done ahead of `shown` found, with what the watch reported since its
        mark; None when no such sweep is done or the watch cannot tell."""
        swept = self._sweeps.get(which)
        if (
            swept is None
            or swept.identity != shown.identity
            or not swept.done.is_set()
            or swept.mark is None
        ):
            return None
        after = since(swept.mark)
        return None if after is None else swept.dirty | set(after)

    def changed(
        self, token: str, tree: Tree, since: Callable[[Mark], list[bytes] | None]
    ) -> list[bytes] | None:
        """For a `token_for` token: the paths git must check itself (the session's own, the
        entries whose worktree file does not match, a name in each directory whose untracked
        files git must list again); None when the real index is no longer the one the token
        names (git then checks everything). `since` says what the lower watch reported
        after a mark (None: it cannot), which makes a sweep done ahead as good as one now."""
        shown = self._shown
        if shown is None or token != token_for(shown.identity):
            return None
        try:
            st = longpath.call(os.stat, self.real_index)
        except OSError:
            return None
        if identity(st) != shown.identity:
            return None
        worktree = self._swept_dirty(_REAL, shown, since)
        if worktree is None:
            worktree = self._worktree_dirty(shown)
        return self._with_session(shown, worktree, tree)

    def note_mounted(self, tree: Tree) -> None:
        """Notes the session's own index as the view mounts with it (see `remounted`)."""
        n = tree.resolve(tree.lower.git.index_file)
        if n is not None and n.upper:
            self._own_mounted = ((n.ino, n.size, n.mtime_ns), tree.read(n, 0, n.size))

    def _own_index(self) -> _Shown | None:
        """The session's own index as the view mounted with it, parsed (None: none, or one
        `indexfile` does not read)."""
        with self._parsing:
            mounted = self._own_mounted
            if self._own is not None or mounted is None:
                return self._own
            data = mounted[1]
            index = indexfile.parse(data)
            if index is None:
                self._own_mounted = None
                return None
            # (its mtime is git's racy-clean line, as for the real index)
            own = (*mounted[0], mounted[0][2])
            cache = indexfile.untracked(index)
            token = indexfile.fsmonitor_token(index)
            self._own = _Shown(own, index, cache, data[-indexfile.HASH :], (), token)
            return self._own

    @property
    def remounting(self) -> bool:
        """Whether the view mounted with an index of the session's own (see `remounted`)."""
        return self._own_mounted is not None

    def remounted(
        self, token: str, tree: Tree, since: Callable[[Mark], list[bytes] | None]
    ) -> list[bytes] | None:
        """For the token of an old daemon's journal: what git must check itself, when the
        session's own index is still the one the view mounted with and names that token (the
        index git read); None otherwise (git then checks everything). `since` as for
        `changed`: a sweep of that index done ahead counts."""
        n = tree.resolve(tree.lower.git.index_file)
        mounted = self._own_mounted
        if mounted is None or n is None or not n.upper or (n.ino, n.size, n.mtime_ns) != mounted[0]:
            return None
        own = self._own_index()
        if own is None or own.token != token:
            return None
        worktree = self._swept_dirty(_OWN, own, since)
        if worktree is None:
            worktree = self._worktree_dirty(own)
        return self._with_session(own, worktree, tree)

    def _with_session(self, shown: _Shown, worktree: set[bytes], tree: Tree) -> list[bytes]:
        """`worktree` (what the worktree itself says against the index `shown`) with what the
        session's own layer changes on top of it."""
        named, replaced = session_changes(tree)
        dirty = worktree | named | {d + b"/" for d in replaced}
        for path in shown.index.paths if replaced else ():
            if path not in named and _below(path, replaced):
                dirty.add(path)
        for path, seen in shown.untracked.dirs if shown.untracked is not None else ():
            rel = path[:-1]
            if seen is not None and (rel in named or _below(path, replaced)):
                # Any name in a directory makes git list the directory again.
                dirty.add(path + UNLISTED)
        return sorted(dirty)

    def _worktree_dirty(self, shown: _Shown) -> set[bytes]:
        """What the worktree itself says, the session aside: the entries whose file does not
        match (or is racily clean), and a name in each directory of the untracked cache that
        is not as the cache saw it (the root always: the session's `.git` is its own). Swept
        in C, without the GIL (`git/_indexsweep.c`), on `SWEEP_THREADS` threads."""
        # Racily clean as git built without nanoseconds sees it, the coarser of its two checks.
        racy_from = shown.identity[2] // 1_000_000_000
        dirty: set[bytes] = set()
        dirs: list[tuple[bytes, tuple[int, ...]]] = []  # ("a/b", its stat data) to check
        for path, seen in shown.untracked.dirs if shown.untracked is not None else ():
            if seen is None:
                continue  # git lists it again anyway
            if path:
                dirs.append((path[:-1], seen))
            else:
                dirty.add(UNLISTED)
        data, threads = shown.index.data, SWEEP_THREADS
        swept = _indexsweep.sweep(data, self.worktree, racy_from, dirs, threads)
        if swept is None:  # (`parse` read the entries, by the same walk)
            raise ValueError("the index's entries cannot be read")
        paths, stale = swept
        dirty.update(paths)
        dirty.update(dirs[i][0] + b"/" + UNLISTED for i in stale)
        return dirty


def session_changes(tree: Tree) -> tuple[set[bytes], set[bytes]]:
    """Every worktree path the session's own layer names (made, changed or removed), and of
    those the directories that replace the worktree's whole subtree there (removed, renamed
    in, made anew); git's own (`gitdir.in_git`) left out."""
    named: set[bytes] = set()
    replaced: set[bytes] = set()
    todo = [(ROOT_INODE, b"")]
    while todo:
        ino, path = todo.pop()
        d = tree.nodes.get(ino)
        for name, child in (d.entries or {}).items() if d is not None else ():
            rel = join(path, name)
            if in_git(rel):
                continue
            named.add(rel)
            c = tree.nodes.get(child) if child else None
            if c is None:
                replaced.add(rel)  # removed: a file, or a directory and all below it
            elif c.entries is not None:
                if c.origin != rel:
                    replaced.add(rel)
                todo.append((child, rel))
    return named, replaced


def _below(path: bytes, dirs: set[bytes]) -> bool:
    """Whether a directory above `path` is among `dirs` (a renamed or removed directory)."""
    at = path.rfind(b"/")
    while at > 0:
        path = path[:at]
        if path in dirs:
            return True
        at = path.rfind(b"/")
    return False
