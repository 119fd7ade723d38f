"""numba, numba-cuda and llvmlite made unimportable in this process, as in an
install of numba-cuda-mlir alone (``pip install "gpucache_ext[mlir-cu12]"``).

``run(code)`` runs `code` in a new Python process where `install` ran first:
an import of any of them raises ModuleNotFoundError and
``importlib.util.find_spec`` raises it too (as for a package that is not
there, whose parent cannot be found).  In an environment where they are not
installed at all, the same code runs the same way.
"""

import importlib.abc
import json
import os
import subprocess
import sys
from pathlib import Path

ABSENT = ("numba", "numba_cuda", "llvmlite")


class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def install() -> None:
    """Make them unimportable from now on (none of them may be imported yet)."""
    loaded = [name for name in sys.modules if name.partition(".")[0] in ABSENT]
    assert not loaded, f"already imported: {loaded}"
    sys.meta_path.insert(0, _Absent())


_PRELUDE = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import numba_cuda_absent; " \
           "numba_cuda_absent.install()\n"


def run(code: str, env=None, timeout: int = 300) -> subprocess.CompletedProcess:
    """`code` run in a new process without numba-cuda; it must exit 0."""
    done = subprocess.run([sys.executable, "-c", _PRELUDE + code], capture_output=True, text=True, timeout=timeout,
                          cwd=Path(__file__).parent.parent, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def answer(code: str, env=None) -> dict:
    """What `code` (run as `run` does) prints last, a JSON object."""
    return json.loads(run(code, env).stdout.strip().splitlines()[-1])
