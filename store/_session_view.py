"""A session read as it is on disk, for a state this process cannot write.

:meth:`SessionCore.open` takes ``<sid>/.lock`` and recovers (sweeps temp
files, replays the journal, checkpoints): all writes, refused on a
read-only state. Reading needs none of them, so :func:`read_session_as_found`
loads the index without them: the reads (``nodes``, ``get_branch``,
``list_branches``, ``problems``) behave as on an opened core, and every
mutation fails at the lock. What the journal still holds is not replayed:
:attr:`unreplayed` says whether there is any, so the reader can say its view
may be behind.
"""

from __future__ import annotations

import os

from ._errors import SessionNotFoundError
from ._journal import JOURNAL_NAME
from ._links import refuse_session_alias
from ._session import SessionCore
from ._sessions import SESSIONS, missing_meta

__all__ = ["read_session_as_found", "unreplayed"]


def read_session_as_found(state_dir: str | os.PathLike[str], session: str) -> SessionCore:
    """``session`` as its files are now: no lock taken, nothing recovered, nothing written."""
    core = SessionCore(state_dir, session)
    if not os.path.isfile(os.path.join(core.directory, "meta.json")):
        sessions_dir = os.path.join(core.state_dir, SESSIONS)
        raise missing_meta(sessions_dir, core.session) or SessionNotFoundError(
            core.session, f"{SESSIONS}/{session}")
    refuse_session_alias(os.path.join(core.state_dir, SESSIONS), core.session)
    core.refresh()
    return core


def unreplayed(core: SessionCore) -> bool:
    """Whether ``core``'s journal holds bytes an opening would replay (or cut)."""
    try:
        return os.path.getsize(os.path.join(core.directory, JOURNAL_NAME)) > 0
    except OSError:
        return False
