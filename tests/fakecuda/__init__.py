"""A recording stand-in for the CUDA driver, for tests without a GPU.

``fakecuda.c`` (next to this file) is compiled at test time with the system C
compiler into ``libcuda.so.1``.  A script run through :func:`run` gets that
library first on ``LD_LIBRARY_PATH``, so cuda-bindings (via cuda.pathfinder's
``dlopen("libcuda.so.1")``) and numba-cuda (``ctypes.CDLL("libcuda.so")``)
load it instead of the real driver.  Kernels "launch" without running; every
driver call that matters (loads, lookups, attribute sets, launches with their
marshalled parameter bytes, allocations, copies, memsets, stream/event
creation) is recorded as one JSON object per line::

    {"call": "cuLaunchKernelEx", "args": {"function": "kernel#1", ...}}

Handles are stable ids in order of creation (``ctx#1``, ``lib#1``,
``kernel#1``, ``func#1``, ``stream#1``, ``event#1``, ``pool#1``), device
addresses are deterministic (a bump allocator over a region mapped at
0x200000000000 + device * 64 GiB, 256-byte aligned), images are given by kind,
size and SHA-256, parameter buffers as hex -- so the same program gives the
same trace byte for byte.

Python API::

    from tests import fakecuda
    res = fakecuda.run("script.py", cc=("9.0", "8.0"))
    res.returncode, res.calls, res.stdout, res.stderr

Command line::

    python -m tests.fakecuda run SCRIPT.py [--cc 9.0[,8.0]] [-- script args...]

Environment understood by the library: ``FAKECUDA_DEVICES`` (``9.0,8.0``;
default ``9.0``) and ``FAKECUDA_TRACE`` (trace file; unset = record nothing).

Progress notes / status live in the README section of ``fakecuda.c``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = [
    "CompilerMissing",
    "RunResult",
    "available",
    "build",
    "run",
    "skip_reason",
]

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fakecuda.c"
BUILD_ROOT = HERE / "build"
REPO_ROOT = HERE.parent.parent
CFLAGS = ("-O2", "-g0", "-Wall", "-shared", "-fPIC", "-std=gnu11")
LIBS = ("-lpthread", "-ldl")
SONAME = "libcuda.so.1"


class CompilerMissing(RuntimeError):
    """No usable C compiler: tests turn this into a skip with ``reason``."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class BuildError(RuntimeError):
    """The C compiler ran but failed: a bug in fakecuda.c, not a skip."""


def _find_cc() -> str:
    for cand in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if not cand:
            continue
        path = shutil.which(cand)
        if path:
            return path
    raise CompilerMissing("no C compiler (cc/gcc/clang) on PATH to build the fake CUDA driver")


def _build_key() -> str:
    h = hashlib.sha256()
    h.update(SOURCE.read_bytes())
    h.update(repr((CFLAGS, LIBS, sys.platform)).encode())
    return h.hexdigest()[:16]


def build() -> Path:
    """Compile ``fakecuda.c`` (if needed) and return the directory holding
    ``libcuda.so.1`` (and a ``libcuda.so`` symlink).  Cached under
    ``tests/fakecuda/build/<sha256 of the source>``."""
    if not sys.platform.startswith("linux"):
        raise CompilerMissing(f"the fake CUDA driver is Linux-only (platform {sys.platform})")
    out = BUILD_ROOT / _build_key()
    lib = out / SONAME
    link = out / "libcuda.so"
    if lib.is_file() and link.exists():
        return out
    cc = _find_cc()
    out.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".libcuda.", suffix=".tmp", dir=out)
    os.close(fd)
    try:
        cmd = [cc, *CFLAGS, f"-Wl,-soname,{SONAME}", "-o", tmp, str(SOURCE), *LIBS]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except OSError as exc:  # compiler vanished / not executable
            raise CompilerMissing(f"cannot run C compiler {cc}: {exc}") from exc
        if proc.returncode != 0:
            raise BuildError(f"building the fake CUDA driver failed:\n{' '.join(cmd)}\n{proc.stderr}")
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    tmp_link = out / f".libcuda.so.{os.getpid()}.tmp"
    if tmp_link.is_symlink() or tmp_link.exists():
        tmp_link.unlink()
    tmp_link.symlink_to(SONAME)
    os.replace(tmp_link, link)
    return out


def skip_reason() -> str | None:
    """None when the stand-in can be built here, else why not (for pytest.skip)."""
    try:
        build()
    except CompilerMissing as exc:
        return exc.reason
    return None


def available() -> bool:
    return skip_reason() is None


@dataclasses.dataclass
class RunResult:
    returncode: int
    calls: list[dict]
    stdout: str
    stderr: str
    trace_lines: list[str] = dataclasses.field(default_factory=list)

    def of(self, call: str) -> list[dict]:
        """The args of every recorded call named ``call``."""
        return [c["args"] for c in self.calls if c["call"] == call]

    def launches(self) -> list[dict]:
        return [
            c["args"]
            for c in self.calls
            if c["call"] in ("cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel")
        ]

    def jsonl(self) -> str:
        return "".join(line + "\n" for line in self.trace_lines)


def _cc_list(cc) -> list[str]:
    if isinstance(cc, str):
        cc = cc.split(",")
    out = []
    for c in cc:
        if isinstance(c, tuple):
            c = "%d.%d" % c
        c = str(c).strip()
        if c:
            out.append(c)
    return out or ["9.0"]


def environment(lib_dir: Path, cc=("9.0",), trace_path: str | None = None, env: dict | None = None) -> dict:
    """The environment a script needs to load the stand-in."""
    e = dict(os.environ if env is None else env)
    e["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(lib_dir), e.get("LD_LIBRARY_PATH", "")) if p)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), e.get("PYTHONPATH", "")) if p)
    e["FAKECUDA_DEVICES"] = ",".join(_cc_list(cc))
    e.pop("FAKECUDA_TRACE", None)
    if trace_path:
        e["FAKECUDA_TRACE"] = trace_path
    for var in ("NUMBA_ENABLE_CUDASIM", "NUMBA_DISABLE_CUDA", "CUDA_VISIBLE_DEVICES"):
        e.pop(var, None)
    return e


def run(
    script,
    cc=("9.0",),
    args=(),
    env: dict | None = None,
    trace: bool = True,
    timeout: float | None = 600,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
) -> RunResult:
    """Run ``script`` with ``sys.executable`` in a fresh process against the
    stand-in driver; return its exit status, recorded calls and output."""
    lib_dir = build()
    with tempfile.TemporaryDirectory(prefix="fakecuda-") as tmp:
        trace_path = os.path.join(tmp, "trace.jsonl") if trace else None
        e = environment(lib_dir, cc, trace_path, env)
        proc = subprocess.run(
            [sys.executable, str(script), *map(str, args)],
            env=e,
            stdout=stdout,
            stderr=stderr,
            text=True,
            timeout=timeout,
        )
        lines: list[str] = []
        if trace_path and os.path.exists(trace_path):
            with open(trace_path, encoding="utf-8") as fh:
                lines = [ln.rstrip("\n") for ln in fh if ln.strip()]
    calls = [json.loads(ln) for ln in lines]
    return RunResult(proc.returncode, calls, proc.stdout or "", proc.stderr or "", lines)
