"""``python -m gpucache_ext``: the ``gpucache`` command."""

import sys

from .cli import main

sys.exit(main())
