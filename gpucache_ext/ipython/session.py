"""One IPython session of the extension: what ``%load_ext gpucache_ext``
sets up and ``%unload_ext gpucache_ext`` takes down.

A `Session` owns everything the extension keeps for a shell: its settings
(read once, when the extension loads), its default `KernelCache`, the cell
counter and each cache's per-cell history of hits and misses, the inspectors
it has shown, and its hooks, registered as its own bound methods (IPython's
autoreload extension is the model).  No module keeps session state.

The per-cell history reads only the caches' counters (`KernelCache.lookups`);
what the tiers hold (a SCAN on a Redis tier) is read only when an open
inspector refreshes.
"""

from __future__ import annotations

import contextlib
import sys

import weakref
from dataclasses import dataclass
from typing import Any, Dict, Optional

import IPython

from .. import sessions
from ..importing import installed
from ..pipeline import definitions
from ..pipeline.history import CellHistory  # noqa: F401  (its home is history; importable here too)
from .auto import AutoCells
from .magic import GpuCacheMagics

# IPython 9.8 moved counting a stored cell before the pre_run_cell event
_COUNTS_BEFORE_PRE_RUN_CELL = tuple(IPython.version_info[:2]) >= (9, 8)


@dataclass(frozen=True)
class Settings:
    """The extension's settings, read once when it loads: each the magic's
    trait (``c.GpuCacheMagics.<name>``), else its ``GPUCACHE_*`` variable."""

    default_sm: str = ""
    cache_dir: str = ""
    redis_url: str = ""
    audit: str = ""
    quiet: bool = False

    @classmethod
    def from_magics(cls, magics) -> "Settings":
        return cls(default_sm=magics.default_sm, cache_dir=magics.cache_dir, redis_url=magics.redis_url,
                   audit=magics.audit, quiet=bool(magics.quiet))

    def cache_arguments(self) -> Dict[str, Any]:
        """`KernelCache.from_environment` arguments: the settings that are set."""
        return {key: value for key, value in (("directory", self.cache_dir), ("redis_url", self.redis_url),
                                              ("audit", self.audit)) if value}


class Session:
    """The extension's state for one IPython shell (see the module's doc)."""

    def __init__(self, shell):
        self.shell = shell
        self.magics = GpuCacheMagics(shell=shell, session=self)
        self.settings = Settings.from_magics(self.magics)
        self.auto = AutoCells(shell)  # %gpucache auto
        self.auto.on = bool(self.magics.auto)
        self._cache = None
        self._in_cell = False  # between pre_run_cell and post_run_cell
        self.cell_count = 0
        self._histories: "weakref.WeakKeyDictionary[Any, CellHistory]" = weakref.WeakKeyDictionary()
        self.inspectors: "weakref.WeakSet" = weakref.WeakSet()
        self.audits_reported: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
        self._overrides: Dict[str, Any] = {}
        self._warned = False
        # the notebook's cell ids (JupyterLab and Notebook send them): by
        # execution count, and each id's latest count (`gpucache_ext.pipeline.definitions`)
        self._cell_ids: Dict[int, Optional[str]] = {}
        self._numbers: Dict[str, int] = {}
        self.places = definitions.Places(self.cell_of, self._numbers.get)
        """Where kernels are defined: this shell's cells (by id) and files."""

    # -- the default cache ------------------------------------------------------
    @property
    def cache(self):
        """The session's `KernelCache` (made on first use from the settings)."""
        if self._cache is None:
            from ..pipeline.cache import KernelCache

            self._cache = KernelCache.from_environment(**{**self.settings.cache_arguments(), **self._overrides})
            self._cache.hold_audits(self._in_cell)
            self._histories[self._cache] = CellHistory()  # made here: all its activity is in cells
        return self._cache

    def configure_cache(self, **overrides) -> None:
        """Build the cache again, on next use, with these `from_environment` arguments."""
        self._overrides = dict(overrides)
        self._cache = None

    def history(self, cache) -> CellHistory:
        """`cache`'s per-cell history (started on first use: earlier activity is one column)."""
        history = self._histories.get(cache)
        if history is None:
            history = self._histories[cache] = CellHistory()
            history.record("earlier", cache.lookups())
        return history

    # -- load and unload -----------------------------------------------------
    def load(self) -> None:
        from IPython.core.error import UsageError

        from ..pipeline.audit import parse_audit
        from ..backends.numba_cuda.launch.device import cuda_simulator_on, gpu_available

        try:
            parse_audit(self.settings.audit)
        except ValueError as exc:
            raise UsageError(f"GpuCacheMagics.audit (or GPUCACHE_AUDIT): {exc}") from None
        from ..store import settings

        try:  # the shared tier's settings, read as the cache will read them (each names its variable)
            settings.keyring()
            settings.redis_prefix()
            settings.redis_ttl()
        except settings.SettingError as exc:
            raise UsageError(str(exc)) from None
        if not cuda_simulator_on():  # the cells will compile: a missing toolchain is said now, with its fix
            from ..errors import ToolchainMissing
            from ..toolchain import require

            try:
                require()
            except ToolchainMissing as exc:
                raise UsageError(str(exc)) from None
        from .cellcode import check_cell_syntax
        from .cell_errors import install_launch_errors

        self.shell.register_magics(self.magics)
        self.shell.events.register("pre_run_cell", self.pre_run_cell)
        self.shell.events.register("post_run_cell", self.post_run_cell)
        if check_cell_syntax not in self.shell.input_transformers_post:  # syntax errors as a plain cell's
            self.shell.input_transformers_post.append(check_cell_syntax)
        self.shell.input_transformers_cleanup.append(self.auto)  # (it is off until %gpucache auto)
        sessions.attach_session(self)  # the default cache, and where kernels are defined (`places`)
        if cuda_simulator_on() or not installed("numba_cuda"):
            return  # numba's own simulator: cells run as plain cells (see `simulated`); or no numba-cuda at all
        from ..backends.numba_cuda.launch.simulator import simulate_memory

        install_launch_errors(self.shell)  # launch errors at the user's launch line
        if not gpu_available():  # cells written for a GPU run on the simulator, memory API too
            simulate_memory(True)

    def unload(self) -> None:
        from ..backends.numba_cuda.launch.device import cuda_simulator_on
        from .cellcode import check_cell_syntax

        if not cuda_simulator_on() and installed("numba_cuda"):
            from ..backends.numba_cuda.launch.simulator import simulate_memory
            from .cell_errors import uninstall_launch_errors

            uninstall_launch_errors(self.shell)
            simulate_memory(False)
        sessions.detach_session(self)
        with contextlib.suppress(ValueError):
            self.shell.events.unregister("pre_run_cell", self.pre_run_cell)
        with contextlib.suppress(ValueError):
            self.shell.events.unregister("post_run_cell", self.post_run_cell)
        if self._cache is not None:
            self._cache.hold_audits(False)
        with contextlib.suppress(ValueError):
            self.shell.input_transformers_post.remove(check_cell_syntax)
        with contextlib.suppress(ValueError):
            self.shell.input_transformers_cleanup.remove(self.auto)
        for widget in list(self.inspectors):
            widget.close()
        self.inspectors.clear()
        magics = self.shell.magics_manager.magics
        magics["cell"].pop("gpukernel", None)
        magics["line"].pop("gpucache", None)
        self.shell.magics_manager.registry.pop(type(self.magics).__name__, None)
        self._cache = None

    # -- hooks and inspectors ------------------------------------------------
    def pre_run_cell(self, info=None) -> None:
        """Before every cell: the cache's background audits wait for its end."""
        self._in_cell = True
        if self._cache is not None:
            self._cache.hold_audits(True)
        cell_id = getattr(info, "cell_id", None)
        # the count the cell's code is named by: IPython 9.8 and later count a stored cell before this
        # event, earlier ones after the cell (post_run_cell sets it again from the cell's result)
        counted = _COUNTS_BEFORE_PRE_RUN_CELL and getattr(info, "store_history", False)
        # a cell run without history has no number of its own (its code is named by the next cell's)
        self._name_cell(self.shell.execution_count - (1 if counted else 0), cell_id,
                        numbered=getattr(info, "store_history", True))

    def _name_cell(self, number, cell_id, numbered: bool = True) -> None:
        self._cell_ids[number] = cell_id
        if cell_id and numbered:
            self._numbers[cell_id] = number

    def cell_of(self, filename: str):
        """(cell id or None, execution count) of the cell whose code is named
        `filename`; None where it is no cell's (a file)."""
        from .cellcode import cell_names

        number = (cell_names(self.shell) or {}).get(filename)
        if number is None:
            return None
        return self._cell_ids.get(number), number

    def post_run_cell(self, result=None) -> None:
        """After every cell: kernels re-check their inputs at their next launch;
        each watched cache's history gets the cell's hits and misses; open
        inspectors refresh; background audits may run."""
        from ..backends.numba_cuda.launch.device import cuda_simulator_on

        self._in_cell = False
        self.auto.cell_ended()
        if self._cache is not None:
            self._cache.hold_audits(False)
        if not cuda_simulator_on():  # (under numba's simulator no Kernel exists)
            from ..launch.registry import refresh_all

            refresh_all()
        info = getattr(result, "info", None)
        if info is not None and getattr(result, "execution_count", None) is not None:
            self._name_cell(result.execution_count, getattr(info, "cell_id", None),
                            numbered=getattr(info, "store_history", True))
            if (not _COUNTS_BEFORE_PRE_RUN_CELL and getattr(info, "store_history", False)
                    and getattr(result.error_before_exec, "gpucache_cell_syntax", False)):
                # IPython before 9.8 counts a cell whose input transformer raised twice (a plain
                # cell's SyntaxError once), so later cells would read one more than the notebook shows
                self.shell.execution_count = result.execution_count + 1
        try:
            self.cell_count += 1
            count = getattr(result, "execution_count", None)
            label = f"[{count}]" if count else f"#{self.cell_count}"  # (a cell run without a count)
            caches = [widget.cache for widget in self._open_inspectors()]
            if self._cache is not None:
                caches.append(self._cache)
            seen = set()
            for cache in caches:
                if id(cache) not in seen:
                    seen.add(id(cache))
                    self.history(cache).record(label, cache.lookups())
            for widget in self._open_inspectors():
                widget.refresh()
        except Exception as exc:  # never fail the user's cell
            if not self._warned:
                self._warned = True
                import warnings

                from ..errors import DisplayWarning

                warnings.warn(f"gpucache_ext inspector: could not update after the cell: {exc!r}",
                              DisplayWarning, stacklevel=2)

    def _open_inspectors(self):
        for widget in list(self.inspectors):
            if getattr(widget, "comm", None) is None:
                self.inspectors.discard(widget)
            else:
                yield widget

    def inspector(self, cache=None):
        """The live inspector of `cache` (default: the session's): the same
        widget while it is open, so every place it is shown updates together."""
        from ..widgets import Inspector

        cache = self.cache if cache is None else cache
        for widget in self._open_inspectors():
            if widget.cache is cache:
                widget.refresh()
                return widget
        widget = Inspector(cache, history=self.history(cache), siblings=self._open_inspectors)
        self.inspectors.add(widget)
        return widget


def current(shell=None) -> Optional[Session]:
    """The session of `shell` (default: the running IPython's), if the extension is loaded there."""
    if shell is None:
        ipython = sys.modules.get("IPython")  # the core never imports IPython itself
        get = getattr(ipython, "get_ipython", None)
        shell = get() if get is not None else None
    if shell is None:
        return None
    magics = shell.magics_manager.registry.get("GpuCacheMagics")
    return getattr(magics, "session", None)


def load(shell):
    """Start a `gpucache_ext.ipython.session.Session` on `shell`: magics, hooks, settings."""
    Session(shell).load()


def unload(shell):
    """Take down the session `load` started (if any)."""
    session = current(shell)
    if session is not None:
        session.unload()

