"""Per-cell hit and miss history of a cache: what the inspector charts.

The IPython session records a point after each cell; the widgets read it.
It imports nothing of IPython or the widgets, so both can use it.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Tuple

from ..keys.stagespec import ALL_STAGES

_HISTORY_POINTS = 500

__all__ = ["CellHistory"]


class CellHistory:
    """One cache's hits and misses per cell: a point per cell that looked anything up."""

    def __init__(self, lookups: Optional[Dict[str, Tuple[int, int, int]]] = None):
        self.points: List[Dict[str, Any]] = []
        self.last: Dict[str, Tuple[int, int]] = {s: (v[0], v[1]) for s, v in (lookups or {}).items()}

    def record(self, label: str, lookups: Dict[str, Tuple[int, int, int]]) -> Optional[dict]:
        """Add a point labelled `label` with the hits and misses since the last
        one (if any changed)."""
        now = {s: (int(v[0]), int(v[1])) for s, v in lookups.items() if s in ALL_STAGES}
        delta = {s: (now[s][0] - self.last.get(s, (0, 0))[0], now[s][1] - self.last.get(s, (0, 0))[1])
                 for s in now}
        if delta.get("fatbin") == (0, 0):  # (a stage only multi-target builds use)
            del delta["fatbin"]
        self.last.update(now)
        if not any(h or m for h, m in delta.values()):
            return None
        point = {"label": label, "stages": delta, "time": time.time()}
        self.points.append(point)
        del self.points[:-_HISTORY_POINTS]
        return point
