"""``python -m gpucache_ext.cli``: the ``gpucache`` command."""

import sys

from . import main

if __name__ == "__main__":  # (imported, as the import-hygiene test imports every module, it runs nothing)
    sys.exit(main())
