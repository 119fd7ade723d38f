"""Helpers shared by the test modules (fixtures are in conftest.py).

- `notebook_namespace`, `run_cell`, `reading`: a notebook's namespace and its
  cells, without IPython.
- `cell`: a ``%%gpukernel`` cell run in the `ip` fixture's shell.
- `artifacts`, `fresh`, `assert_fresh`: what a brand-new `KernelCache`
  compiles, which every cache must serve.
- `run_python`, `in_new_processes`: code run in a new interpreter, in the project root.
- `gpucache`: the ``gpucache`` command run as a subprocess (`gpucache_cli`, in
  conftest.py, runs it in this process).
- `free_port`: a free TCP port on loopback.
- `require_chromium`: Debian's Chromium, or a skip (a failure when CI is set).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _cuda_major() -> int:
    from gpucache_ext.toolchain import cuda_major

    return cuda_major()


# The installed toolchain's CUDA major (the cu12 or cu13 extra; CI runs the quick suite under each).
CUDA_MAJOR = _cuda_major()
# CUDA 13 builds no target before sm_75, and numba-cuda's lowering reads the target only across
# sm_60 (native float64 atomic add) and sm_75 (tanh.approx under fastmath): under CUDA 13 every
# target answers alike, so a test of targets whose lowering differs is CUDA 12's alone.
needs_pre_turing = pytest.mark.skipif(
    CUDA_MAJOR >= 13, reason="CUDA 12 only: it compiles for a target before sm_75 (sm_50..sm_72), which CUDA 13 "
    "no longer builds; numba-cuda's lowering reads the target only across sm_60 and sm_75")


def buildable(sms):
    """Those of `sms` the installed toolchain builds (CUDA 13: sm_75 and later)."""
    from gpucache_ext.keys.config import supported_ccs

    return tuple(sm for sm in sms if divmod(sm, 10) in supported_ccs())
CHROMIUM = Path("/usr/bin/chromium")


def notebook_namespace():
    """A fresh namespace standing in for a notebook's user namespace."""
    from numba import cuda

    return {"cuda": cuda, "__name__": "__main__"}


def run_cell(namespace, source, filename="<cell>", first_line=1):
    """Run `source` (dedented) in `namespace` as a notebook cell would, its code
    object named `filename` and starting at `first_line`."""
    code = compile("\n" * (first_line - 1) + textwrap.dedent(source), filename, "exec")
    exec(code, namespace)


READ_K = """
def kernel(r):
    r[0] = K
"""


# a kernel calling a device function that reads the global G
DEVICE_READS_G = """
@cuda.jit(device=True)
def scale(x):
    return x * G

def kernel(r):
    r[0] = scale(r[0])
"""


def reading(source, name="kernel", **globals_):
    """Run `source` as a cell in a new notebook namespace holding `globals_`;
    returns the namespace and its `name` (the kernel the cell defined)."""
    ns = notebook_namespace()
    ns.update(globals_)
    run_cell(ns, source)
    return ns, ns[name]


def cell(ip, line, body, *, kernel=None, quiet=False, store_history=False, cell_id=None):
    """Run ``%%gpukernel {line}`` over `body` in the IPython shell `ip`; raise
    what the cell raised.  Returns the last `CompileResult` of the kernel named
    `kernel` where one is named, else the cell's `ExecutionResult`.  `quiet`
    adds ``--quiet`` after `line`; `store_history` numbers the cell as a
    notebook would (the inspector's chart labels cells by number); `cell_id`
    is the notebook cell's id, as JupyterLab sends it."""
    result = ip.run_cell(f"%%gpukernel {line}{' --quiet' if quiet else ''}\n{body}", store_history=store_history,
                         cell_id=cell_id)
    if not result.success:
        raise result.error_in_exec
    if kernel is not None:
        return ip.user_ns[kernel].last
    return result


def artifacts(result):
    """The code a compile produced: (LLVM IR, PTX, cubin)."""
    return result.llvm_ir, result.ptx, result.cubin


def fresh(func, sig, config):
    """The `artifacts` of `func` compiled for `sig` under `config` in a
    brand-new (memory-only) `KernelCache`: what any cache must serve."""
    from gpucache_ext import KernelCache

    return artifacts(KernelCache().compile(func, sig, config))


def assert_fresh(cache, func, sig, config, *, differs_from=None):
    """Compile through `cache`; must equal a fresh compile (and differ from `differs_from`)."""
    result = cache.compile(func, sig, config)
    assert artifacts(result) == fresh(func, sig, config)
    if differs_from is not None:
        assert result.cubin != differs_from.cubin, "the edit should have changed the code"
    return result


def run_python(code, *args, timeout=300, env=None, json_line=False):
    """Run `code` (dedented) in a new interpreter in the project root (so
    ``tests`` imports), with `args` as its arguments and `env` added to this
    process's environment; assert it exits 0.  Returns its stdout, or with
    `json_line` the JSON of the last line it printed."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]) if json_line else done.stdout


def in_new_processes(script, folder, values):
    """Run `script` (which compiles into a disk cache in `folder`) once per value,
    each in a fresh interpreter; returns the JSON each printed last."""
    return [run_python(script, folder, value, json_line=True) for value in values]


def gpucache(*args, expect=0, timeout=120, env=None):
    """Run ``python -m gpucache_ext *args`` in the project root, with `env` added
    to this process's environment; assert its exit status is `expect`.
    Returns the `CompletedProcess` (text stdout and stderr)."""
    done = subprocess.run([sys.executable, "-m", "gpucache_ext", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    assert done.returncode == expect, done.stdout + done.stderr
    return done


def free_port() -> int:
    """A TCP port free on 127.0.0.1 (the OS's choice) at the time of asking."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def require_chromium():
    """Debian's Chromium (browsers are never downloaded): skip where it is
    missing, unless CI is set (then it must be there)."""
    if CHROMIUM.exists():
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and {CHROMIUM} is missing: install it with apt-get install -y chromium")
    pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium); this test runs in CI")


def run_notebook(cells, allow_errors=True, cwd=ROOT):
    """A new notebook of code `cells`, run in a fresh Jupyter kernel (nbclient) in `cwd`."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(notebook, timeout=600, kernel_name="python3", allow_errors=allow_errors,
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return notebook
