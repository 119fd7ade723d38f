"""GPU check for gpucache_ext: run once on a machine with an NVIDIA GPU.

    python scripts/gpu_check.py [--out docs/gpu-check.md]

1. compiles axpy, a 16x16 tiled matmul and a float64 atomic reduction for this
   GPU's sm through the staged cache, launches them on the GPU and compares
   with numpy;
2. checks the PTX fallback: axpy compiled for an older major sm runs through
   the driver's JIT, and a target newer than the GPU is refused with the --sm
   to use;
3. loads multi-target kernels' fatbins (nvFatbin): one holding this GPU's
   cubin, one whose cubins are all for an older major architecture (the
   driver compiles its PTX), and one with neither (refused, naming the
   target to add);
4. runs every launch form of tests/launch_forms.py (streams, dynamic shared
   memory, forall, specialize, grid sync, a debug kernel, a carveout, records,
   a second GPU where there is one) three ways, numba-cuda's own dispatcher,
   gpucache_ext.jit and %%gpukernel, each in a fresh process, and compares
   every array they leave (the recording stand-in driver proves the driver
   calls equal without a GPU; only a GPU shows the numbers are);
5. times a launch whose kernel is already cached against a cold one.

It says what it could not check on this machine (a second GPU, an older or
newer architecture).  One command, under 3 minutes on an idle GPU.

Prints a Markdown report (and writes it with --out); exits 1 if a check fails.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from numba import cuda

from gpucache_ext import CompileConfig, Kernel, KernelCache, LaunchError, samples
from gpucache_ext.keys.config import Targets
from gpucache_ext.backends.numba_cuda.launch.kernel import device_cc, gpu_available

# The sample kernels (gpucache_ext/samples.py), as plain numba-cuda dispatchers.
axpy = samples.load(samples.AXPY)["axpy"]
_matmul = samples.load(samples.MATMUL)
matmul, TPB = _matmul["matmul"], _matmul["TPB"]
total = samples.load(samples.TOTAL)["total"]

AXPY_SIG = "void(float32[::1], float32, float32[::1], float32[::1])"


def check_kernels(sm, lines):
    ok = True
    rng = np.random.default_rng(0)
    cache = KernelCache()
    config = CompileConfig(sm=sm)

    x, y = rng.random(100_000, dtype=np.float32), rng.random(100_000, dtype=np.float32)
    r = np.zeros_like(x)
    Kernel(axpy, [AXPY_SIG], config, cache)[(x.size + 255) // 256, 256](r, np.float32(3.0), x, y)
    ok &= _report(lines, "axpy", np.allclose(r, 3 * x + y, rtol=1e-6))

    a, b = rng.random((300, 200), dtype=np.float32), rng.random((200, 250), dtype=np.float32)
    c = np.zeros((300, 250), np.float32)
    grid = ((250 + TPB - 1) // TPB, (300 + TPB - 1) // TPB)
    Kernel(matmul, config=config, cache=cache)[grid, (TPB, TPB)](a, b, c)
    ok &= _report(lines, "tiled matmul 16x16", np.allclose(c, a @ b, rtol=1e-4, atol=1e-3))

    v = rng.random(1_000_000)
    acc = np.zeros(1)
    Kernel(total, config=config, cache=cache)[(v.size + 255) // 256, 256](acc, v)
    ok &= _report(lines, "float64 atomic reduction", np.isclose(acc[0], v.sum(), rtol=1e-9))
    return ok


def check_fallbacks(device, lines):
    ok = True
    older = 80 if device[0] > 8 else 75 if device[0] > 7 else None
    if older is not None:
        x = np.arange(4096, dtype=np.float32)
        r = np.zeros_like(x)
        kernel = Kernel(axpy, [AXPY_SIG], CompileConfig(sm=older), KernelCache())
        kernel[16, 256](r, np.float32(2.0), x, x)
        ok &= _report(lines, f"sm_{older} PTX JIT-compiled by the driver on sm_{device[0]}{device[1]}",
                      np.allclose(r, 3 * x))
    newer = 120 if device < (12, 0) else None
    if newer is not None:
        kernel = Kernel(axpy, [AXPY_SIG], CompileConfig(sm=newer), KernelCache())
        try:
            kernel[1, 32](np.zeros(32, np.float32), np.float32(1), np.zeros(32, np.float32),
                          np.zeros(32, np.float32))
            ok &= _report(lines, f"sm_{newer} refused on this GPU", False)
        except LaunchError as exc:
            ok &= _report(lines, f"sm_{newer} refused with the --sm to use ({exc})",
                          f"--sm {device[0]}{device[1]}" in str(exc))
    return ok


def check_fatbins(device, lines):
    ok = True
    sm = device[0] * 10 + device[1]
    x = np.arange(4096, dtype=np.float32)
    cache = KernelCache()
    others = [t for t in (75, 80, 86, 90) if t < sm][-2:]
    targets = tuple(others) + (sm,)
    r = np.zeros_like(x)
    kernel = Kernel(axpy, [AXPY_SIG], CompileConfig(), cache, targets=targets)
    kernel[16, 256](r, np.float32(2.0), x, x)
    members = ", ".join(m.name for m in kernel.last.members)
    ok &= _report(lines, f"fatbin of {members}: the driver picks the sm_{sm} cubin", np.allclose(r, 3 * x))
    older = [t for t in (75, 80) if t // 10 < device[0]]
    if older:
        r = np.zeros_like(x)
        kernel = Kernel(axpy, [AXPY_SIG], CompileConfig(), cache, targets=older)
        kernel[16, 256](r, np.float32(2.0), x, x)
        members = ", ".join(m.name for m in kernel.last.members)
        ok &= _report(lines, f"fatbin of {members} on sm_{sm}: the driver compiles its PTX", np.allclose(r, 3 * x))
        kernel = Kernel(axpy, [AXPY_SIG], CompileConfig(), cache, targets=Targets(older, ptx="none"))
        try:
            kernel[1, 32](np.zeros(32, np.float32), np.float32(1), np.zeros(32, np.float32),
                          np.zeros(32, np.float32))
            ok &= _report(lines, f"fatbin of {older} cubins alone refused on sm_{sm}", False)
        except LaunchError as exc:
            ok &= _report(lines, f"fatbin of {older} cubins alone refused ({exc})", f"add {sm}" in str(exc))
    return ok


ROOT = Path(__file__).resolve().parent.parent


def check_launch_forms(lines):
    """The launch forms three ways, on this GPU: the same arrays every way."""
    with tempfile.TemporaryDirectory() as tmp:
        computed = {}
        for mode in ("numba", "jit", "magic"):
            out = Path(tmp) / f"{mode}.json"
            env = {**os.environ, "GPUCACHE_DIR": str(Path(tmp) / "cache"), "LAUNCH_FORMS_RESULTS": str(out),
                   "PYTHONPATH": str(ROOT)}
            done = subprocess.run([sys.executable, str(ROOT / "tests" / "launch_forms.py"), mode], env=env,
                                  capture_output=True, text=True, timeout=300)
            if not _report(lines, f"launch forms through {mode}: ran", done.returncode == 0):
                lines.append("```\n" + done.stderr[-3000:] + "\n```")
                return False
            computed[mode] = json.loads(out.read_text())
    ok = True
    for form, arrays in computed["numba"].items():
        for mode in ("jit", "magic"):
            same = computed[mode].get(form) == arrays
            ok &= _report(lines, f"launch form {form}: {mode} computes what numba-cuda computes "
                                 f"({len(arrays)} arrays)", same)
    return ok


def not_checked(device) -> list:
    """What this machine cannot show."""
    missing = []
    if len(cuda.gpus) < 2:
        missing.append("a second GPU: the two-device form ran on this one alone, and a second "
                       "architecture was not compiled at launch")
    if device[0] <= 7:
        missing.append("the PTX fallback from an older major architecture")
    if device >= (12, 0):
        missing.append("refusing a target newer than the GPU")
    return missing


def time_launches(sm, lines, runs=5):
    x = np.arange(1 << 20, dtype=np.float32)
    r = np.zeros_like(x)
    args = (r, np.float32(2.0), x, x)
    cold, warm = [], []
    cache = KernelCache()
    for _ in range(runs):
        start = time.perf_counter()
        Kernel(axpy, [AXPY_SIG], CompileConfig(sm=sm), KernelCache())[4096, 256](*args)
        cuda.synchronize()
        cold.append(time.perf_counter() - start)
        Kernel(axpy, [AXPY_SIG], CompileConfig(sm=sm), cache)[4096, 256](*args)  # warm the cache
        start = time.perf_counter()
        Kernel(axpy, [AXPY_SIG], CompileConfig(sm=sm), cache)[4096, 256](*args)
        cuda.synchronize()
        warm.append(time.perf_counter() - start)
    cold_ms, warm_ms = statistics.median(cold) * 1e3, statistics.median(warm) * 1e3
    lines.append(f"| first launch, cold compile | {cold_ms:.1f} ms |")
    lines.append(f"| first launch of a cached kernel (new Kernel object) | {warm_ms:.1f} ms |")
    lines.append(f"| ratio | {cold_ms / warm_ms:.1f}x |")


def tune_sweep(sm, lines):
    """Kernel.tune over 3 variants x 3 block sizes of axpy on device arrays:
    each pair's median time, and the one bound."""
    base = CompileConfig(sm=sm)
    kernel = Kernel(axpy, [AXPY_SIG], base, KernelCache(),
                    variants=[base, base.replace(max_registers=32), base.replace(fastmath=True)])
    x = cuda.to_device(np.arange(1 << 22, dtype=np.float32))
    r = cuda.device_array(1 << 22, np.float32)
    result = kernel.tune(r, np.float32(2.0), x, x, blocks=(128, 256, 512), runs=7)
    lines += ["| variant | block | median |", "|---|---|---|"]
    lines += [f"| {config} | {block} | {ms:.3f} ms |" for config, block, ms in result.table]
    lines += ["", f"Bound: {result}"]
    return _report(lines, "tune() timed every variant and bound the fastest",
                   result.measured and min(result.table, key=lambda row: row[2])[:2]
                   == (result.config.summary(), result.block))


def _report(lines, name, passed):
    lines.append(f"- {'PASS' if passed else 'FAIL'}: {name}")
    return bool(passed)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args()
    if not gpu_available():
        print("no NVIDIA GPU or driver found: nothing to check", file=sys.stderr)
        return 2
    device = device_cc()
    sm = device[0] * 10 + device[1]
    name = cuda.get_current_device().name
    name = name.decode() if isinstance(name, bytes) else name
    lines = ["# GPU check", "", f"GPU: {name} (sm_{sm}); Python {platform.python_version()}", "",
             "## Kernels against numpy", ""]
    ok = check_kernels(sm, lines)
    lines += ["", "## Targets other than this GPU's", ""]
    ok &= check_fallbacks(device, lines)
    lines += ["", "## Multi-target kernels (fatbins)", ""]
    ok &= check_fatbins(device, lines)
    lines += ["", "## Launch forms: numba-cuda, gpucache_ext.jit and %%gpukernel", ""]
    ok &= check_launch_forms(lines)
    lines += ["", "## Tuning a sweep: Kernel.tune on the GPU", ""]
    ok &= tune_sweep(sm, lines)
    lines += ["", "## Launch time (median of 5)", "", "| launch | time |", "|---|---|"]
    time_launches(sm, lines)
    lines += ["", "## Not checked on this machine", ""]
    lines += [f"- {what}" for what in not_checked(device)] or ["- nothing"]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
