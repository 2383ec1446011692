"""One session as a command holds it: its registry row, its session dir and what lies in it,
its view and its writer.

A command resolves the session once (`SessionHandle.resolve`, or `of` around a row it has) and
passes the handle down, so the session dir's layout (`overlay/layout.py`), the view opener
and the "through the live daemon, or offline" writer are each in one place, and what a
command asks the registry and the daemon is asked once:

- `status()` asks the daemon whether it serves the session, once per handle (where the view
  is mounted does not change while a command runs; what must not race a daemon starting,
  the writer, asks again under the mount lock).
- `sync()` has the live daemon commit its state, once per handle: every `view()` after it
  reads the same state. `sync(again=True)` is for a command that let the session be written
  to meanwhile (an apply reading the view anew after its commit).
- what changes the delta through the handle (`drop_paths`, `writer`) makes the next view ask
  the daemon again.
- `reread()` takes the row as the registry has it now (under the apply lock: another apply
  may have moved the base), `refresh()` the daemon's state too (a unit of work that starts
  later in a long command: each apply's `prepare`); `set_base` writes the base.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gitsess.errors import GitsessError
from gitsess.git.location import RepoContext
from gitsess.overlay import control, layout
from gitsess.store.registry import Registry, Session

if TYPE_CHECKING:
    from gitsess.git.view import Stamp
    from gitsess.overlay.protocol import DaemonStatus
    from gitsess.overlay.view import OverlayView
    from gitsess.services.viewwrite import ViewWriter

_UNASKED = object()


class SessionHandle:
    def __init__(self, ctx: RepoContext, row: Session) -> None:
        self.ctx = ctx
        self.row = row
        self.dir = ctx.session_dir(row.id)
        self._status: object = _UNASKED
        self._synced = False

    @classmethod
    def of(cls, ctx: RepoContext, session: Session | SessionHandle) -> SessionHandle:
        """The handle a caller passed, or one around the row it passed."""
        return session if isinstance(session, SessionHandle) else cls(ctx, session)

    @classmethod
    def resolve(cls, ctx: RepoContext, ref: str | None) -> SessionHandle:
        """The session `ref` names (see `sessions.resolve`)."""
        from gitsess.services import sessions

        return cls(ctx, sessions.resolve(ctx, ref))

    # -- the session dir

    @property
    def delta(self) -> Path:
        return self.dir / layout.DELTA

    @property
    def data(self) -> Path:
        return self.dir / layout.DATA

    @property
    def journal(self) -> Path:
        return self.dir / layout.APPLY_JOURNAL

    @property
    def apply_lock(self) -> Path:
        return self.dir / layout.APPLY_LOCK

    @property
    def daemon_log(self) -> Path:
        return self.dir / layout.DAEMON_LOG

    # -- the registry row

    def reread(self) -> Session:
        """The row as the registry has it now (kept as is when it is gone from there)."""
        with Registry.opened(self.ctx.registry_path, create=False) as registry:
            self.row = (registry and registry.by_id(self.row.id)) or self.row
        return self.row

    def refresh(self) -> Session:
        """`reread`, and the next view asks the daemon again: for a unit of work that starts
        later in a long command (each attempt of a gated apply)."""
        self._synced = False
        return self.reread()

    def set_base(self, base: str | None) -> None:
        """Move the session's base (nothing when the session was removed meanwhile)."""
        with Registry.opened(self.ctx.registry_path, create=False) as registry:
            # (an update of a session removed meanwhile changes nothing, and says so)
            if registry is not None:
                with contextlib.suppress(GitsessError):
                    self.row = registry.update(self.row.id, base_commit=base)

    # -- the daemon

    def status(self) -> DaemonStatus | None:
        """The live daemon's view of itself (None: not mounted), asked once."""
        if self._status is _UNASKED:
            self._status = None
            if self.served():
                from gitsess.runtime import mount

                self._status = mount.status(self.dir)
        return self._status  # type: ignore[return-value]

    def served(self) -> bool:
        """Whether a daemon serves the session (it holds the session's daemon lock), told
        without loading the client of its protocol: the sessions of `ls` are mostly idle."""
        return control.serving(str(self.dir))

    def mountpoint(self) -> Path:
        status = self.status()
        return Path(status.mountpoint) if status else self.dir / layout.MOUNTPOINT

    def sync(self, *, again: bool = False) -> None:
        """Have the live daemon (if any) commit its state, so the delta has it."""
        if again or not self._synced:
            if self.served():
                from gitsess.runtime import mount

                mount.sync(self.dir)
            self._synced = True

    def drop_paths(
        self,
        paths: Sequence[str],
        restamp: Sequence[str] = (),
        expect: Mapping[str, Stamp | None] | None = None,
        *,
        root: Path | None = None,
    ) -> list[str]:
        """`live.drop_paths` for the session's view over `root` (its worktree by default);
        what the delta holds changed, so the next view asks the daemon again."""
        from gitsess.services import live

        self._synced = False
        row = self.row if root is None else replace(self.row, worktree=root)
        return live.drop_paths(self.ctx, row, paths, restamp, expect)

    # -- the view

    def hidden(self) -> tuple[str, ...]:
        """The state dir, when it lies inside the worktree, never shows in the view."""
        try:
            return (str(self.ctx.state_dir.resolve().relative_to(self.row.worktree.resolve())),)
        except ValueError:
            return ()

    def view(self, root: Path | None = None, at: int | None = None) -> OverlayView:
        """The session's view over `root` (its worktree by default), the live daemon's writes
        included; with `at`, as it was at that checkpoint (a context manager: closed after)."""
        self.sync()
        return self.offline_view(root, at)

    def offline_view(self, root: Path | None = None, at: int | None = None) -> OverlayView:
        """`view` without asking the daemon: for callers that know none serves the session."""
        from gitsess.overlay.view import OverlayView

        if root is None:
            self._check_reachable(at)
        return OverlayView(self.delta, root or self.row.worktree, self.hidden(), at)

    def _check_reachable(self, at: int | None) -> None:
        """Inside a run the worktree's path shows the run's own view, not the real files, and
        nothing leads to them: a view over it is right only for the run's own session as it
        is now (its changes over themselves). Another session read there showed the run's
        changes as its own; a checkpoint, files made since as there before."""
        from gitsess.services.counts import out_of_reach
        from gitsess.services.sessions import SESSION_ID_ENV

        if not out_of_reach(self.row):
            return
        if at is None and os.environ.get(SESSION_ID_ENV) == self.row.id:
            return
        what = f"session {self.row.name}" + (f" at checkpoint {at}" if at is not None else "")
        raise GitsessError(
            f"{what} cannot be read inside this run: {self.row.worktree} shows the run's view "
            "here, not the real files it is made over; run this outside the session"
        )

    def writer(self, lower: Path | None = None) -> AbstractContextManager[ViewWriter]:
        """A writer into the session's view over `lower` (its worktree by default): through
        the live daemon's mount, or straight into the delta when none serves it."""
        from gitsess.services.viewwrite import view_writer

        self._synced = False  # (what it writes through a live daemon is that daemon's to commit)
        return view_writer(self.ctx, self.row, lower or self.row.worktree)


def worktree_gone(session: Session) -> GitsessError:
    """The error of a session whose worktree was removed (or moved: `git worktree move`); `run`
    and `real_tree` refuse it so."""
    return GitsessError(
        f"session {session.name} is bound to {session.worktree}, which no longer exists: "
        f"`gitsess gc` archives the session, and `gitsess restore {session.name}` run in a "
        "worktree brings it back there"
    )
