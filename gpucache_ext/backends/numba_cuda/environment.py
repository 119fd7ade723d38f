"""Environment variables read while numba types or lowers, as inputs.

Code that runs inside numba's pipeline is not the kernel's, and the walk of
what a kernel reads does not see it: an ``@overload`` generator, an
``@intrinsic``'s typer or code generator, a ``type_callable`` typer.  One
that reads an environment variable (``os.environ.get("SCALE")``,
``os.getenv``) builds other code when the variable changes, in this process
or the next one on the same disk folder.

So every read of ``os.environ`` made by such code while numba's pipeline runs
in the compiling thread is recorded (`recorded`): reads by numba's own code
and by this package are not (numba re-reads its ``NUMBA_*`` settings, which
the tokens hold as settings).  The first time a variable is read, the compile
starts again (`NewEnvironmentReads`, a `SnapshotChanged`): the variable joins
the variables every typing token holds by value (`environment_components`),
so nothing is filed under a token that did not hold what it was built from.
A new process learns them again on its first compile of such code (one
typing more), and until then its tokens, lacking them, match no entry built
from them.

What such code reads from files, sockets or the clock cannot be keyed; it is
a documented limitation (docs/design.md): pass the value as a global or an
argument instead.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Dict, List

from ...errors import SnapshotChanged
from ...sources.values import short
from ...keys.tokens import Component, component
from ... import memos

# the variables code in numba's pipeline has read in this process
_KNOWN: set = memos.state("backends.numba_cuda.environment._KNOWN", set(),
                           "the variables numba's runs read: every typing token keys them from then on")
_recording = threading.local()  # per thread: the names read in the open `recorded` block (None outside)
_ORIGINAL_GETITEM = os._Environ.__getitem__
# what reads through `os._Environ.__getitem__` for others (``os.getenv``, ``Mapping.get``, ``in``,
# iteration): their code's file names, frozen or not
_PLUMBING = frozenset({"<frozen os>", "<frozen _collections_abc>", os.__file__,
                       getattr(sys.modules.get("_collections_abc"), "__file__", None)} - {None})
# the package's folder (this module's is three below it): its own reads are never the user's
_OWN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "")


class NewEnvironmentReads(SnapshotChanged):
    """Code in numba's pipeline read environment variables no token held yet:
    the compile starts again, holding them."""


def _recording_getitem(self, key):
    names = getattr(_recording, "names", None)
    if names is not None and self is os.environ and _by_user_code(sys._getframe(1)):
        names.add(key if isinstance(key, str) else repr(key))
    return _ORIGINAL_GETITEM(self, key)


def _by_user_code(frame) -> bool:
    """Whether the read comes from user code: past ``os.getenv``,
    ``Mapping.get`` and ``in`` (which read through it) and past any library
    (``os.path.expanduser``, platformdirs: a library reads for whoever called
    it), the first caller that is not numba's or this package's."""
    from ...sources.usercode import library_file, numba_code

    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_OWN) or numba_code(filename):
            return False
        if filename not in _PLUMBING and not filename.startswith("<frozen ") and not library_file(filename):
            return True  # (a frozen module is the standard library's: <frozen posixpath>)
        frame = frame.f_back
    return False


@contextlib.contextmanager
def recorded():
    """Around a run of numba's pipeline (typing, lowering) in this thread:
    records what code there reads of ``os.environ``; the outermost block
    raises `NewEnvironmentReads` at its end where a variable was read that
    no token holds yet (on an error, the variable is learnt, the error
    raised)."""
    if getattr(_recording, "names", None) is not None:  # (nested: the outermost block records)
        yield
        return
    names: set = set()
    _recording.names = names
    os._Environ.__getitem__ = _recording_getitem  # (numba's lock is held: one compiling thread at a time)
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        os._Environ.__getitem__ = _ORIGINAL_GETITEM
        _recording.names = None
        new = sorted(names - _KNOWN)
        _KNOWN.update(new)
        if new and not failed:
            raise NewEnvironmentReads(
                f"code numba ran while compiling read environment variable(s) {', '.join(new)}: "
                "compiled again, keyed by their values")


def known() -> List[str]:
    """The variables code in numba's pipeline has read in this process."""
    return sorted(_KNOWN)


def environment_components() -> Dict[str, Component]:
    """The typing token's components for the variables `known` names, one a
    variable (``environment SCALE``, so that a miss names it), by their
    values now (none while there are none)."""
    return {f"environment {name}": component([name, os.environ.get(name)], short(repr(os.environ.get(name))))
            for name in sorted(_KNOWN)}
