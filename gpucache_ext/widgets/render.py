"""Moved: the renderers are `gpucache_ext.views` (they import no ipywidgets).

This name keeps working, with a DeprecationWarning, for code that imported it.
"""

import warnings

from .. import views

warnings.warn("gpucache_ext.widgets.render moved to gpucache_ext.views; import it from there",
              DeprecationWarning, stacklevel=2)


def __getattr__(name):
    return getattr(views, name)


def __dir__():
    return dir(views)
