"""Per-agent state isolation: each (session, role) participant gets its own state directory.

Coding-agent CLIs key their conversations by working directory, so two agents of one CLI in one
workspace would resume, and overwrite, the same conversation. Each participant's CLI is pointed
(by its profile's lever) at an isolation root seeded with links to the shared login and
settings files. See `profiles` (data), `roots` (disk) and `participants` (services).
"""

from gitsess.services.agents.participants import (
    AgentInfo,
    RunningParticipant,
    collect_orphans,
    finish,
    list_participants,
    prepare,
    purge_session,
    refresh,
    stop,
)
from gitsess.services.agents.profiles import Lever, Profile
from gitsess.services.agents.roots import Refresh

__all__ = [
    "AgentInfo",
    "Lever",
    "Profile",
    "Refresh",
    "RunningParticipant",
    "collect_orphans",
    "finish",
    "list_participants",
    "prepare",
    "purge_session",
    "refresh",
    "stop",
]
