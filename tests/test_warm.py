"""gpucache warm (issue 34): a module's gpucache_ext.jit kernels and a
notebook's %%gpukernel cells built into a cache ahead of a job, so that a
new process only reads; what could not be warmed is named, with why.
Real compiles, in new processes."""

import json
import textwrap

import pytest

from .helpers import gpucache, run_python

MODULE = '''
import gpucache_ext
from numba import cuda


@gpucache_ext.jit("void(float32[:], float32[:])")
def double(r, x):
    for i in range(cuda.grid(1), r.size, cuda.gridsize(1)):  # (a grid-stride loop)
        r[i] = 2 * x[i]


@gpucache_ext.jit
def lazy(r):
    r[0] = 1
'''


@pytest.fixture
def module(tmp_path):
    path = tmp_path / "warmkernels.py"
    path.write_text(textwrap.dedent(MODULE))
    return path


# three processes, eight compiles (the quick run warms a module in
# test_the_flags_may_come_before_the_path_as_warms_help_shows_them)
@pytest.mark.slow
def test_a_modules_kernels_are_warmed_for_every_target_and_config(tmp_path, module):
    folder = tmp_path / "cache"
    done = gpucache("warm", module, "--sm", "80,86", "--dir", folder, "--max-registers", "32,64", expect=1)
    lines = done.stdout.splitlines()
    assert sorted(line for line in lines if line.startswith("built")) == sorted(
        f"built   double (float32[:], float32[:]) [sm_{sm} max_registers={n}]" for sm in (80, 86) for n in (32, 64))
    assert f"{module}: 4 built, 0 already cached" in lines
    assert any(line.startswith("not warmed: lazy: a lazy kernel (no signature)") for line in lines)
    again = gpucache("warm", module, "--sm", "80,86", "--dir", folder, "--max-registers", "32,64", "--json",
                     expect=1)
    found = json.loads(again.stdout)
    assert found["built"] == [] and len(found["cached"]) == 4 and [r["what"] for r in found["not_warmed"]] == ["lazy"]
    # a new process of the job compiles nothing: every persisted stage is read from the folder
    outcomes = run_python(f"""
        import json, sys
        sys.path.insert(0, {str(module.parent)!r})
        import warmkernels
        from gpucache_ext import CompileConfig, KernelCache
        cache = KernelCache(directory={str(folder)!r}, audit=False)
        result = cache.compile(warmkernels.double.py_func, "void(float32[:], float32[:])",
                               CompileConfig(sm=80, max_registers=64))
        print(json.dumps({{s: [d.outcome.value, d.tier] for s, d in result.stages.items()}}))
        """, json_line=True)
    assert {s: o for s, o in outcomes.items() if s != "typing"} == {s: ["hit", "disk"] for s in ("llvm", "ptx",
                                                                                                  "cubin")}


def test_the_flags_may_come_before_the_path_as_warms_help_shows_them(tmp_path, module):
    # (the flags were passed on as they came: the words after --opt were taken for the path)
    done = gpucache("warm", "--sm", "86", "--opt", "2", "--fastmath", "--launch-bounds", "128,2", module,
                    "--dir", tmp_path / "cache", "--json", expect=1)
    found = json.loads(done.stdout)
    assert [row["config"] for row in found["built"]] == ["sm_86 opt=2 fastmath=True launch_bounds=(128, 2)"]
    done = gpucache("warm", "--sm", "86", "--opt", "5", tmp_path / "nb.ipynb", expect=2)
    assert "--opt 5: '5' is no optimisation level" in done.stderr  # (refused before a notebook runs)


@pytest.mark.slow  # (a process per refusal, about 5 s; the flag refusals before a notebook runs are quick, above)
def test_warm_refuses_what_it_cannot_do_and_names_the_fix(tmp_path, module):
    done = gpucache("warm", module, "--sm", "86", "--dir", tmp_path, "--block", "128", expect=2)
    assert "unrecognized arguments: --block" in done.stderr and "--max-registers" in done.stderr
    done = gpucache("warm", "no_such_module_here", "--sm", "86", "--dir", tmp_path, expect=2)
    assert "no module named 'no_such_module_here'" in done.stderr and ".ipynb" in done.stderr
    done = gpucache("warm", module, "--sm", "12", "--dir", tmp_path, expect=2)
    assert "sm=" in done.stderr and "use one of" in done.stderr
    plain = tmp_path / "plain.py"
    plain.write_text("X = 1\n")
    done = gpucache("warm", plain, "--sm", "86", "--dir", tmp_path, expect=1)
    assert "defines no gpucache_ext.jit kernel" in done.stdout
    done = gpucache("ls", "--bogus", expect=2)
    assert "unrecognized arguments: --bogus" in done.stderr


@pytest.mark.slow
def test_a_notebooks_cells_are_warmed_in_a_fresh_kernel(tmp_path):
    import nbformat

    cells = [
        "import numpy as np",
        "%%gpukernel --sm 86\nfrom numba import cuda\n@cuda.jit('void(float32[:], float32[:])')\n"
        "def scale(r, x):\n    i = cuda.grid(1)\n    if i < r.size:\n        r[i] = 3 * x[i]",
        "%%gpukernel\nfrom numba import cuda\n@cuda.jit\ndef later(r):\n    r[0] = 1",
        "open('missing-input.csv').read()",
    ]
    path = tmp_path / "job.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
    folder = tmp_path / "cache"
    first = json.loads(gpucache("warm", path, "--sm", "80,86", "--dir", folder, "--fastmath", "on", "--json",
                                expect=1, timeout=600).stdout)
    assert first["cells"] == 2 and first["built"] > 0
    whats = [row["what"] for row in first["not_warmed"]]
    assert whats[0].startswith("cell 4 (open(") and "FileNotFoundError" in first["not_warmed"][0]["why"]
    assert whats[1] == "later" and "lazy kernel" in first["not_warmed"][1]["why"]
    second = json.loads(gpucache("warm", path, "--sm", "80,86", "--dir", folder, "--fastmath", "on", "--json",
                                 expect=1, timeout=600).stdout)
    assert second["built"] == 0 and second["cached"] >= first["built"]  # the job's processes only read
    listed = gpucache("ls", "--dir", folder, "--json").stdout
    assert '"config": "sm_80,86 +ptx 80 fastmath=True"' in listed  # (each cell's kernels: one fatbin)
