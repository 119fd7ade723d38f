"""The loaded extension's session, as a value the core holds.

A loaded extension's IPython session attaches itself here (`attach_session`)
and detaches when it is unloaded; the core asks `current_session` for the
default cache and `places` for where code is defined (notebook cells and
files), and imports nothing of IPython.  This module imports nothing of the
package at import time but `memos` (which imports nothing), so every core
module may ask it.
"""

from __future__ import annotations

from typing import Any, List

from . import memos

__all__ = ["attach_session", "detach_session", "current_session", "places"]

# the loaded extensions' sessions, the latest last (one per IPython shell in practice)
_sessions: List[Any] = memos.state("sessions._sessions", [], "the sessions loaded in this process")


def attach_session(session) -> None:
    """A loaded extension's session is the current one (until `detach_session`)."""
    detach_session(session)
    _sessions.append(session)


def detach_session(session) -> None:
    """`session` was unloaded: the one attached before it, if any, is current again."""
    _sessions[:] = [other for other in _sessions if other is not session]


def current_session():
    """The loaded extension's session in the running IPython, else None."""
    return _sessions[-1] if _sessions else None


def places():
    """Where code is defined, as the current session knows it (notebook cells
    and files), else files alone (`gpucache_ext.pipeline.definitions.FILES`): what a
    cache whose ``places`` were not set asks."""
    session = current_session()
    if session is not None:
        return session.places
    from .pipeline.definitions import FILES

    return FILES
