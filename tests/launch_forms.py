"""Launch forms, run three ways for the differential trace test.

    python tests/launch_forms.py MODE [FORM ...]

FORM is a name of `FORMS`, ``doc:NAME`` for one of numba-cuda's documentation
examples, or ``docs`` for all of them (default: `FORMS`).  MODE is how the
kernels are made: ``numba`` (numba-cuda's own ``cuda.jit``,
no cache), ``jit`` (``gpucache_ext.jit`` in its place) or ``magic`` (the
kernels' source as a ``%%gpukernel`` cell in an IPython shell, the launches
in the next cell).  Each FORM is kernel source and launch source; the same
text runs in every mode.  Run under the recording stand-in driver
(``python -m tests.fakecuda run tests/launch_forms.py --cc 9.0 -- MODE``),
the driver calls of the three modes must be the same.

The stand-in runs no kernel, so launches compute nothing there: the launch
sources check nothing of their results.  ``LAUNCH_FORMS_RESULTS=FILE``
writes the SHA-256 of every array each form leaves (on a GPU the modes must
agree: `scripts/gpu_check.py`); ``LAUNCH_FORMS_IMAGES=FILE`` what the cache
handed numba to load (`tests/test_launch_traces.py`);
``LAUNCH_FORMS_FLAGS`` more flags for the magic (``--sm 80``);
``LAUNCH_FORMS_REPORT=1`` prints the magic's report of each kernels' cell.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import textwrap

from gpucache_ext import samples

# name -> (kernels, launches).  Kernels of the numba mode and the jit mode
# are made by `cuda.jit`; launches run in the same namespace.
FORMS = {
    "samples": (
        samples.AXPY + samples.MATMUL + samples.TOTAL.replace("from numba import cuda\n", ""),
        """
        import numpy as np
        x = np.arange(256, dtype=np.float32)
        r = np.zeros_like(x)
        axpy[2, 128](r, np.float32(2.0), x, x)
        A = np.ones((32, 32), np.float32)
        C = np.zeros_like(A)
        matmul[(2, 2), (TPB, TPB)](A, A, C)
        acc = np.zeros(1)
        total[1, 64](acc, np.arange(64.0))
        """),
    "scalars_and_records": (
        """
        import numpy as np
        from numba import cuda

        RECORD = np.dtype([("a", np.int32), ("b", np.float64)], align=True)

        @cuda.jit
        def scalars(r, i32, i64, f32, f64, c128, flag):
            r[0] = i32 + i64 + f32 + f64 + c128.real + flag

        @cuda.jit
        def record(r, rec):
            r[0] = rec.a + rec.b
        """,
        """
        r = np.zeros(1)
        scalars[1, 1](r, np.int32(-3), np.int64(2**40), np.float32(1.5), 2.25, 1 + 2j, True)
        records = np.zeros(1, dtype=RECORD)
        records[0] = (7, 0.5)
        record[1, 1](r, records[0])
        """),
    "streams_shared_configure": (
        """
        import numpy as np
        from numba import cuda, float32

        @cuda.jit
        def staged(r, x):
            buf = cuda.shared.array(0, dtype=float32)
            i = cuda.grid(1)
            if i < r.size:
                buf[cuda.threadIdx.x] = x[i]
                cuda.syncthreads()
                r[i] = buf[cuda.threadIdx.x]
        """,
        """
        x = np.arange(64, dtype=np.float32)
        stream = cuda.stream()
        d_x = cuda.to_device(x, stream=stream)
        d_r = cuda.device_array_like(d_x, stream=stream)
        staged[2, 32, stream, 32 * 4](d_r, d_x)
        d_r.copy_to_host(stream=stream)
        stream.synchronize()
        staged.configure(1, 64, 0, 64 * 4)(d_r, d_x)
        """),
    "forall_specialize": (
        """
        import numpy as np
        from numba import cuda

        @cuda.jit
        def inc(a):
            i = cuda.grid(1)
            if i < a.size:
                a[i] += 1
        """,
        """
        a = cuda.to_device(np.zeros(1000, np.int32))
        inc.forall(a.size)(a)
        special = inc.specialize(a)
        special[4, 256](a)
        inc[1, 32](np.zeros(8))
        """),
    "cooperative": (
        """
        import numpy as np
        from numba import cuda

        @cuda.jit("void(int64[:])")
        def shift(a):
            i = cuda.grid(1)
            g = cuda.cg.this_grid()
            v = a[(i + 1) % a.size]
            g.sync()
            a[i] = v
        """,
        """
        a = cuda.to_device(np.arange(256, dtype=np.int64))
        blocks = shift.overloads[shift.signatures[0]].max_cooperative_grid_blocks(128)
        shift[min(2, blocks), 128](a)
        """),
    "debug_and_carveout": (
        """
        import numpy as np
        from numba import cuda

        @cuda.jit(debug=True, opt=False)
        def checked(a, i):
            a[i] = 1 // (i + 1)

        @cuda.jit(shared_memory_carveout="MaxShared")
        def carved(a):
            a[cuda.grid(1)] = 2
        """,
        """
        a = cuda.to_device(np.zeros(8, np.int64))
        checked[1, 1](a, 3)
        carved[1, 8](a)
        """),
    # numba-cuda calls cuda.jit itself here: CUDA ufuncs stay numba's, cuda.reduce's kernel (called
    # in the kernels' cell) goes through the cache as numba would compile it
    "ufuncs_and_reduce": (
        """
        import numpy as np
        from numba import cuda, guvectorize, vectorize

        @vectorize(["float32(float32, float32)", "float64(float64, float64)"], target="cuda")
        def vadd(a, b):
            return a + b

        @guvectorize(["void(float32[:], float32[:])"], "(n)->(n)", target="cuda")
        def prefix(x, out):
            acc = 0
            for i in range(x.shape[0]):
                acc += x[i]
                out[i] = acc

        total = cuda.reduce(lambda a, b: a + b)(np.arange(64, dtype=np.float64))
        """,
        """
        x = np.arange(32, dtype=np.float32)
        y = vadd(x, x)
        z = prefix(x.reshape(4, 8))
        """),
    "two_devices": (
        """
        import numpy as np
        from numba import cuda

        @cuda.jit
        def fill(a, v):
            i = cuda.grid(1)
            if i < a.size:
                a[i] = v
        """,
        """
        fill[1, 16](np.zeros(16), 1.0)
        if len(cuda.gpus) > 1:
            with cuda.gpus[1]:
                fill[1, 16](np.zeros(16), 2.0)
        fill[1, 16](np.zeros(16), 3.0)
        """),
}


def doc_examples() -> dict:
    """numba-cuda's documentation examples as forms (``doc:test_cg.test_ex_grid_sync``):
    (the example module's imports, the test method's body), run as one text."""
    from tests.test_doc_examples import doc_examples as found

    return {f"doc:{name}": (path, imports, body) for name, path, imports, body, _ in found()}


def source(form: str):
    kernels, launches = FORMS[form]
    return textwrap.dedent(kernels).strip() + "\n", textwrap.dedent(launches).strip() + "\n"


def run(mode: str, form: str) -> dict:
    """Run one form; its namespace after the launches."""
    if form.startswith("doc:"):
        return run_example(mode, form)
    kernels, launches = source(form)
    if mode == "magic":
        from IPython.core.interactiveshell import InteractiveShell

        shell = InteractiveShell.instance()
        before = set(shell.user_ns)
        shell.run_line_magic("load_ext", "gpucache_ext")
        flags = os.environ.get("LAUNCH_FORMS_FLAGS", "")  # e.g. a pinned target: --sm 80
        quiet = "" if os.environ.get("LAUNCH_FORMS_REPORT") else "--quiet "  # the cell's report on stdout
        for cell in (f"%%gpukernel {quiet}{flags}\n{kernels}", launches):
            shell.run_cell(cell).raise_error()
        namespace = {name: value for name, value in shell.user_ns.items() if name not in before}
        shell.run_line_magic("unload_ext", "gpucache_ext")
        shell.reset()  # the next form starts afresh, as in the other modes
        return namespace
    namespace = {"__name__": f"launch_forms_{form}"}
    exec(compile(kernels + launches, f"<launch form {form}>", "exec"), namespace)
    return namespace


def run_example(mode: str, form: str) -> dict:
    """A documentation example, as written.  Its own checks of the numbers
    fail under the stand-in driver, which computes nothing: the example stops
    there, at the same call in every mode."""
    import unittest

    path, imports, body = doc_examples()[form]
    namespace = {"__name__": f"launch_forms_{form[4:].replace('.', '_')}", "self": unittest.TestCase(),
                 "__file__": str(path)}
    for line in imports:  # the example module's own imports
        try:
            exec(line, namespace)
        except ImportError:  # numba's test harness needs numba-cuda's test extras
            pass
    if mode == "magic":
        from IPython.core.interactiveshell import InteractiveShell

        shell = InteractiveShell.instance()
        before = set(shell.user_ns)
        shell.user_ns.update(namespace)
        shell.run_line_magic("load_ext", "gpucache_ext")
        outcome = shell.run_cell(f"%%gpukernel --quiet\n{body}")
        error = outcome.error_in_exec or outcome.error_before_exec
        namespace = {name: value for name, value in shell.user_ns.items() if name not in before}
        shell.run_line_magic("unload_ext", "gpucache_ext")
        shell.reset()
        shell.last_execution_result = outcome = None
    else:
        try:
            exec(compile(body, f"<launch form {form}>", "exec"), namespace)
            error = None
        except Exception as exc:
            error = exc
    if error is not None and not isinstance(error, (AssertionError, unittest.SkipTest)):
        raise error
    print(f"  {form}: {type(error).__name__ if error else 'ran'}", file=sys.stderr)
    return namespace


def images() -> list:
    """What each live cached kernel's variants hold: the SHA-256 of the cached
    artifact a GPU of the compiled target loads (the cubin, or the fatbin),
    and of every image their code libraries handed numba, by architecture."""
    from gpucache_ext import Kernel
    from gpucache_ext.pipeline.results import FatbinResult

    import gc

    found = []
    # every live kernel: also those made inside numba's own helpers (cuda.reduce) with
    # jit standing in (issubclass of the type: isinstance fails on a dead weak proxy)
    kernels = [value for value in gc.get_objects() if issubclass(type(value), Kernel)]
    for kernel in kernels:
        for variant in kernel.overloads.values():
            result = variant.result
            artifact = result.fatbin if isinstance(result, FatbinResult) else result.cubin
            loaded = {f"{cc[0]}.{cc[1]}": hashlib.sha256(bytes(image.code) if isinstance(image.code, bytes)
                                                          else image.code.encode()).hexdigest()
                      for cc, image in variant._codelibrary._cubin_cache.items()}
            found.append({"entry": result.entry_name, "sm": result.config.sm,
                          "artifact": hashlib.sha256(artifact).hexdigest(), "loaded": loaded})
    return found


def results(namespace: dict) -> dict:
    """The SHA-256 of every array the launches left in `namespace` (device
    arrays copied back): on a GPU the three modes must compute the same."""
    import numpy as np

    found = {}
    for name, value in sorted(namespace.items()):
        if hasattr(value, "copy_to_host") and hasattr(value, "__cuda_array_interface__"):
            value = value.copy_to_host()
        if isinstance(value, np.ndarray):
            found[name] = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
    return found


def settle() -> None:
    """Free what the form left, now: numba frees device memory lazily (when
    enough is pending), so in each mode the frees would follow the garbage
    collector's timing, not the program's."""
    import gc

    from numba import cuda

    for name in ("last_type", "last_value", "last_traceback", "last_exc"):  # a failed example's frames
        if hasattr(sys, name):
            setattr(sys, name, None)
    gc.collect()
    if cuda.is_available():
        cuda.current_context().deallocations.clear()


def main(argv) -> int:
    mode, forms = argv[0], argv[1:] or list(FORMS)
    if "docs" in forms:  # every documentation example
        at = forms.index("docs")
        forms = forms[:at] + list(doc_examples()) + forms[at + 1:]
    if mode == "jit":
        import numba.cuda

        import gpucache_ext

        numba.cuda.jit = gpucache_ext.jit
    elif mode not in ("numba", "magic"):
        raise SystemExit(f"mode must be numba, jit or magic, not {mode!r}")
    held, computed = [], {}
    for form in forms:
        print(f"form {form}", file=sys.stderr)
        namespace = run(mode, form)
        if mode != "numba":
            held += images()
        computed[form] = results(namespace)
        namespace.clear()  # (the kernels' globals: numba keeps its dispatchers, and so them, alive)
        settle()
    for variable, value in (("LAUNCH_FORMS_IMAGES", held), ("LAUNCH_FORMS_RESULTS", computed)):
        if os.environ.get(variable):  # what the cache handed numba; what the launches computed
            with open(os.environ[variable], "w") as out:
                json.dump(value, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
