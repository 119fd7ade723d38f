"""What NVRTC compiles for a linked .cu source is what its digest hashed.

A `.cu` file given to ``cuda.declare_device(..., link=[...])`` is compiled by
NVRTC under its basename, so NVRTC looks for a quoted include in the working
directory (not beside the file), then in numba's ``--include-path`` folders and
``NUMBA_CUDA_NVRTC_EXTRA_SEARCH_PATHS``.  Each test edits the file system the
way that once left a stale compile (the cache kept the old constant while a
fresh NVRTC compile read the new one), and checks the linked code against a
fresh compile by NVRTC itself (`fresh`: numba's options, no memo).
"""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpucache_ext import CompileConfig, KernelCache, UnsupportedKernelError
from gpucache_ext.toolchain import linking

from .helpers import notebook_namespace, run_cell

CC = (8, 6)
SOURCE = """
    {includes}
    extern "C" __device__ int value(int* out) {{
        *out = V;
        return 0;
    }}
"""


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip())
    return path


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """src/ holds the .cu file, cwd/ is the working directory, inc/ and inc2/
    are NVRTC's extra search paths (in that order)."""
    from numba.cuda.core import config

    folders = SimpleNamespace(**{name: tmp_path / name for name in ("src", "cwd", "inc", "inc2")})
    for folder in vars(folders).values():
        folder.mkdir()
    monkeypatch.chdir(folders.cwd)
    monkeypatch.setattr(config, "CUDA_NVRTC_EXTRA_SEARCH_PATHS", f"{folders.inc}:{folders.inc2}")
    return folders


def source(tree, includes: str) -> Path:
    return write(tree.src / "ext.cu", SOURCE.format(includes=includes))


def constant(ptx: bytes) -> int:
    found = re.search(rb"mov\.u32\s+%r\d+,\s*(-?\d+);\s*st\.u32\s+\[%rd\d+\]", ptx)
    assert found is not None, ptx.decode(errors="replace")
    return int(found.group(1))


def linked(cu: Path) -> int:
    """The value in the code the cache links for `cu` (as the cubin stage
    gets it: read, then compiled through the process-wide memo)."""
    return constant(linking.compile_cu(linking.read(cu), CC, False))


def fresh(cu: Path) -> int:
    """The value in NVRTC's own compile of `cu`, with numba's options."""
    return constant(linking._nvrtc(cu.read_bytes(), cu.name, CC, False))


def agree(cu: Path, value: int) -> None:
    assert (linked(cu), fresh(cu)) == (value, value)


def test_an_include_with_a_comment_inside_the_directive(tree):
    write(tree.inc / "v.h", "#define V 11\n")
    cu = source(tree, '#include /* the value */ "v.h"')
    agree(cu, 11)
    write(tree.inc / "v.h", "#define V 12\n")
    agree(cu, 12)


def test_an_include_through_a_macro(tree):
    write(tree.inc / "v.h", "#define V 21\n")
    cu = source(tree, '#define HEADER "v.h"\n#define INDIRECT HEADER\n#include INDIRECT')
    agree(cu, 21)
    write(tree.inc / "v.h", "#define V 22\n")
    agree(cu, 22)


def test_the_same_name_beside_the_source_and_in_the_working_directory_is_nvrtcs_choice(tree):
    write(tree.src / "w.h", "#define V 31\n")
    write(tree.cwd / "w.h", "#define V 32\n")
    cu = source(tree, '#include "w.h"')
    agree(cu, 32)  # NVRTC reads the working directory's, not the one beside the file
    write(tree.cwd / "w.h", "#define V 33\n")
    agree(cu, 33)


def test_a_header_that_includes_another_sees_the_inner_ones_edits(tree):
    # inc/outer.h's "inner.h": beside it (no), then the search paths (inc2);
    # the working directory's inner.h is not on the way
    write(tree.inc / "outer.h", '#include "inner.h"\n')
    write(tree.inc2 / "inner.h", "#define V 41\n")
    write(tree.cwd / "inner.h", "#define V 49\n")
    cu = source(tree, '#include <outer.h>')
    agree(cu, 41)
    write(tree.inc2 / "inner.h", "#define V 42\n")
    agree(cu, 42)


def test_pragma_once_and_include_guards(tree):
    write(tree.cwd / "once.h", '#pragma once\n#include "v.h"\n')
    write(tree.cwd / "guarded.h", '#ifndef GUARDED_H\n#define GUARDED_H\n#include "guarded.h"\n'
                                  '#include "once.h"\n#endif\n')
    write(tree.src / "v.h", "#define V 59\n")  # beside the source: NVRTC never looks there
    write(tree.inc / "v.h", "#define V 51\n")
    cu = source(tree, '#include "once.h"\n#include "guarded.h"\n#include "once.h"')
    agree(cu, 51)
    write(tree.inc / "v.h", "#define V 52\n")
    agree(cu, 52)


def test_include_next(tree):
    # the working directory's n.h wraps the search path's (include_next
    # continues with the search folders, as in NVRTC)
    write(tree.cwd / "n.h", '#include_next "n.h"\n')
    write(tree.inc / "n.h", "#define V 61\n")
    cu = source(tree, '#include "n.h"')
    agree(cu, 61)
    write(tree.inc / "n.h", "#define V 62\n")
    agree(cu, 62)
    # from a header found on the search path, it goes on with the folders after it
    write(tree.inc / "n.h", '#include_next <n.h>\n')
    write(tree.inc2 / "n.h", "#define V 63\n")
    agree(cu, 63)


def test_a_header_that_appears_in_the_working_directory_shadows_the_search_paths(tree):
    write(tree.src / "v.h", "#define V 79\n")
    write(tree.inc / "v.h", "#define V 71\n")
    cu = source(tree, '#include "v.h"')
    agree(cu, 71)
    write(tree.cwd / "v.h", "#define V 72\n")
    agree(cu, 72)


def test_a_header_that_disappears(tree):
    write(tree.src / "v.h", "#define V 89\n")
    write(tree.cwd / "v.h", "#define V 81\n")
    write(tree.inc / "v.h", "#define V 82\n")
    cu = source(tree, '#include "v.h"')
    agree(cu, 81)
    (tree.cwd / "v.h").unlink()
    agree(cu, 82)


def test_an_edit_that_keeps_size_and_mtime(tree):
    write(tree.src / "v.h", "#define V 99\n")
    header = write(tree.cwd / "v.h", "#define V 91\n")
    cu = source(tree, '#include "v.h"')
    agree(cu, 91)
    stat = header.stat()
    header.write_text("#define V 92\n")
    os.utime(header, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (header.stat().st_size, header.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    agree(cu, 92)


def test_a_header_changed_after_the_source_was_read_is_not_compiled_under_the_old_digest(tree):
    header = write(tree.cwd / "v.h", "#define V 101\n")
    link = linking.read(source(tree, '#include "v.h"'))
    header.write_text("#define V 102\n")
    with pytest.raises(UnsupportedKernelError, match="changed while"):
        linking.compile_cu(link, CC, False)


def test_an_include_whose_name_cannot_be_told_is_refused_by_name(tree):
    cu = source(tree, '#define NAME(x) #x\n#include NAME(v.h)')
    with pytest.raises(UnsupportedKernelError, match="cannot tell which header"):
        linking.read(cu)


def test_a_missing_header_is_nvrtcs_error(tree):
    cu = source(tree, '#include "nowhere.h"')
    with pytest.raises(UnsupportedKernelError, match='cannot open source file "nowhere.h"'):
        linked(cu)


CALLER = """
value = cuda.declare_device("value", "int32(int32)", link={path!r})

def kernel(r):
    r[0] = value(0)
"""


def test_a_fresh_cache_in_the_same_process_sees_the_edit(tree):
    write(tree.src / "v.h", "#define V 119\n")
    header = write(tree.cwd / "v.h", "#define V 111\n")
    write(tree.src / "ext.cu", """
        #include "v.h"
        extern "C" __device__ int value(int* out, int x) {
            *out = x + V;
            return 0;
        }
    """)

    def compile_kernel():
        ns = notebook_namespace()
        run_cell(ns, CALLER.format(path=str(tree.src / "ext.cu")))
        return KernelCache().compile(ns["kernel"], "void(int32[:])", CompileConfig(sm=86)).cubin

    first = compile_kernel()
    header.write_text("#define V 112\n")
    edited = compile_kernel()
    assert edited != first
    header.write_text("#define V 111\n")
    assert compile_kernel() == first


def test_the_digest_names_no_place_the_same_files_elsewhere_hash_and_compile_the_same(tree, tmp_path, monkeypatch):
    """A disk or shared entry carries the digests of what it links: another
    checkout, venv or working directory with the same files must give the
    same digest, and compile what the entry's digest hashed."""
    from numba.cuda.core import config

    write(tree.cwd / "w.h", "#define V 141\n")
    write(tree.inc2 / "x.h", "#define UNUSED 1\n")
    cu = source(tree, '#include "w.h"\n#include <x.h>')
    here = linking.read(cu)
    moved = tmp_path / "moved"
    for name in ("src", "cwd", "inc", "inc2"):
        shutil.copytree(tmp_path / name, moved / name)
    monkeypatch.chdir(moved / "cwd")
    monkeypatch.setattr(config, "CUDA_NVRTC_EXTRA_SEARCH_PATHS", f"{moved / 'inc'}:{moved / 'inc2'}")
    assert linking.read(moved / "src" / "ext.cu").digest == here.digest
    assert constant(linking.compile_cu(here, CC, False)) == 141
    write(moved / "cwd" / "w.h", "#define V 142\n")  # what the entry hashed is not what NVRTC would read here
    with pytest.raises(UnsupportedKernelError, match="changed"):
        linking.compile_cu(here, CC, False)


def test_numbas_own_shim_source_has_one_digest_in_every_working_directory(tmp_path, monkeypatch):
    shims = linking._numba_shims()
    if not shims:
        pytest.skip("this numba-cuda has no shim sources")
    monkeypatch.chdir(tmp_path)
    first = [linking.read(shim) for shim in shims]
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert [linking.read(shim).digest for shim in shims] == [link.digest for link in first]


LINKED = """
    #include "v.h"
    extern "C" __device__ int value(int* out, int x) {
        *out = V;
        return 0;
    }
"""


def compiled_kernel(tree, cache):
    ns = notebook_namespace()
    run_cell(ns, CALLER.format(path=str(tree.src / "ext.cu")))
    return cache.compile(ns["kernel"], "void(int32[:])", CompileConfig(sm=86))


def test_a_header_edited_while_the_kernel_compiles_compiles_again_from_the_new_one(tree, monkeypatch):
    """The header changes after the source was read and before NVRTC runs:
    the compile starts again from the new header (as for an array written
    while it is copied), and gives what a fresh cache gives."""
    header = write(tree.cwd / "v.h", "#define V 151\n")
    write(tree.src / "ext.cu", LINKED)
    real, edited = linking._nvrtc, []

    def edit_once(*args):
        if not edited:
            edited.append(True)
            header.write_text("#define V 152\n")
        return real(*args)

    monkeypatch.setattr(linking, "_nvrtc", edit_once)
    result = compiled_kernel(tree, KernelCache())
    assert edited
    assert result.cubin == compiled_kernel(tree, KernelCache()).cubin
    assert linked(tree.src / "ext.cu") == fresh(tree.src / "ext.cu") == 152


def test_an_audit_after_a_linked_header_changed_is_not_audited_and_warns_of_nothing(tree, tmp_path):
    """A disk hit's audit compiles the snapshot the hit hashed; its .cu
    source's header changed since: NVRTC would read another one, so there is
    nothing to compare like with like (not a failed compile, not a mismatch)."""
    import warnings

    from gpucache_ext import AuditWarning

    header = write(tree.cwd / "v.h", "#define V 161\n")
    write(tree.src / "ext.cu", LINKED)
    compiled_kernel(tree, KernelCache(directory=tmp_path / "disk", audit=False))
    cache = KernelCache(directory=tmp_path / "disk")  # (a new process's: audits its first disk hits)
    cache.hold_audits(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AuditWarning)
        hit = compiled_kernel(tree, cache)
        assert hit.stages["cubin"].tier == "disk"
        header.write_text("#define V 162\n")
        cache.hold_audits(False)
        cache.audit_wait()
    assert hit.audit.state == "not audited", hit.audit
    assert "ext.cu, or a header it includes, changed since the hit" in hit.audit.summary()
    assert cache.stats()["cubin"].audits == 0
    assert cache.audit_not_possible_count == 3
