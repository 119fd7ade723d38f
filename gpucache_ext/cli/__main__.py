"""``python -m gpucache_ext.cli``: the ``gpucache`` command."""

import sys

from . import main

sys.exit(main())
