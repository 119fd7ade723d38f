"""%%gpukernel and %gpucache in a real in-process IPython shell (CPU only:
launches run on numba's CUDA simulator)."""

import re

import numpy as np
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import gpucache_ext
from gpucache_ext import Kernel, samples

from .helpers import buildable, cell

AXPY = '''
from numba import cuda
import numpy as np

@cuda.jit("void(float32[:], float32, float32[:], float32[:])")
def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * x[i] + y[i]
'''


def stage_hits(kernel):
    result = kernel.last
    return {s: stage.hit for s, stage in result.stages.items()}


@pytest.mark.smoke
def test_identical_rerun_hits_every_stage(ip, capsys):
    cell(ip, "--sm 80", AXPY)
    first = ip.user_ns["axpy"]
    assert isinstance(first, Kernel)
    assert stage_hits(first) == dict.fromkeys(("typing", "llvm", "ptx", "cubin"), False)
    cell(ip, "--sm 80", AXPY)
    assert stage_hits(ip.user_ns["axpy"]) == dict.fromkeys(("typing", "llvm", "ptx", "cubin"), True)
    out = capsys.readouterr().out
    assert "first compile of axpy" in out
    assert out.count("axpy") >= 2 and "hit" in out


@pytest.mark.parametrize(
    "flags, recompiled",
    [
        ("--sm 86", {"ptx", "cubin"}),
        ("--sm 80 --opt 0", {"ptx", "cubin"}),
        ("--sm 80 --max-registers 32", {"cubin"}),
        ("--sm 80 --fastmath", {"llvm", "ptx", "cubin"}),
        ("--sm 80 --no-fma", {"ptx", "cubin"}),
        ("--sm 80 --lineinfo", {"typing", "llvm", "ptx", "cubin"}),
        ("--sm 80 --launch-bounds 256,2", {"llvm", "ptx", "cubin"}),
        ("--sm 80 --lto", {"ptx", "cubin"}),
    ],
)
def test_flag_changes_recompile_only_the_stages_that_read_them(ip, flags, recompiled):
    cell(ip, "--sm 80 --quiet", AXPY)
    cell(ip, flags + " --quiet", AXPY)
    hits = stage_hits(ip.user_ns["axpy"])
    assert {s for s, hit in hits.items() if not hit} == recompiled


def test_every_flag_maps_onto_the_config(ip):
    cell(ip, "--sm 8.6 --opt 1 --fastmath --no-ftz --prec-div --no-prec-sqrt --no-fma --lineinfo "
             "--max-registers 40 --launch-bounds 128,2 --lto --quiet", AXPY)
    config = ip.user_ns["axpy"].config
    assert (config.sm, config.opt, config.fastmath, config.ftz, config.prec_div, config.prec_sqrt,
            config.fma, config.lineinfo, config.max_registers, config.launch_bounds, config.lto) == (
        86, 1, True, False, True, False, False, True, 40, (128, 2), True)


def test_decorator_options_override_the_magic_and_enter_the_tokens(ip):
    body = AXPY.replace('@cuda.jit("void(float32[:], float32, float32[:], float32[:])")',
                        '@cuda.jit("void(float32[:], float32, float32[:], float32[:])", '
                        'fastmath=True, max_registers=48)')
    cell(ip, "--sm 80 --quiet", body)
    kernel = ip.user_ns["axpy"]
    assert kernel.config.fastmath and kernel.config.max_registers == 48
    cell(ip, "--sm 80 --quiet", AXPY)
    assert not ip.user_ns["axpy"].last.stages["llvm"].hit  # fastmath differs: not a stale hit


def test_global_edited_in_another_cell_recompiles(ip):
    ip.run_cell("SCALE = 2.0")
    body = '''
from numba import cuda
@cuda.jit("void(float32[:], float32[:])")
def scale(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] * SCALE
'''
    cell(ip, "--sm 80 --quiet", body)
    ip.run_cell("SCALE = 3.0")
    cell(ip, "--sm 80", body)
    result = ip.user_ns["scale"].last
    assert not result.stages["typing"].hit
    assert "global SCALE 2.0 -> 3.0" in result.stages["typing"].reasons


def test_device_function_edited_in_another_cell_recompiles_and_launches_right(ip, capsys):
    cell(ip, "--sm 80 --quiet", '''
from numba import cuda
@cuda.jit(device=True)
def bump(v):
    return v + 1.0
''')
    cell(ip, "--sm 80 --quiet", '''
import numpy as np
@cuda.jit
def apply(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = bump(x[i])
''')
    ip.run_cell("x = np.arange(8, dtype=np.float32); out = np.zeros(8, np.float32); apply[1, 8](out, x)")
    np.testing.assert_allclose(ip.user_ns["out"], np.arange(8) + 1.0)
    cell(ip, "--sm 80 --quiet", '''
@cuda.jit(device=True)
def bump(v):
    return v + 10.0
''')
    ip.run_cell("apply[1, 8](out, x)")
    np.testing.assert_allclose(ip.user_ns["out"], np.arange(8) + 10.0)
    result = ip.user_ns["apply"].last
    assert "device function bump: code changed" in result.stages["typing"].reasons


def test_a_launch_that_recompiles_says_so_with_why_and_a_cell_says_what_it_bound(ip, capsys):
    cell(ip, "--sm 80", '''
from numba import cuda
import numpy as np
ALPHA = 1.5
@cuda.jit(device=True)
def act(v):
    return v * ALPHA
''')
    shown = capsys.readouterr().out
    assert "gpukernel: nothing compiled in this cell; bound:" in shown
    assert "act: device function, compiled into each kernel that calls it" in shown
    assert "no kernel compiled" not in shown
    cell(ip, "--sm 80", '''
@cuda.jit("void(float32[:], float32[:])")
def apply(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = act(x[i])

@cuda.jit
def lazy_add(r, x):
    r[0] = x[0] + 1
''')
    shown = capsys.readouterr().out
    assert "gpukernel: also bound:" in shown
    assert "lazy_add: compiles at its first launch, per argument types" in shown
    ip.run_cell("x = np.arange(8, dtype=np.float32); out = np.zeros(8, np.float32); apply[1, 8](out, x)")
    assert "at this launch" not in capsys.readouterr().out  # nothing compiled: nothing said
    ip.run_cell("ALPHA = 3.0")
    ip.run_cell("apply[1, 8](out, x)")
    np.testing.assert_allclose(ip.user_ns["out"], np.arange(8) * 3.0)
    lines = [line for line in capsys.readouterr().out.splitlines() if "at this launch" in line]
    assert lines == ["gpukernel: compiled apply (float32[:], float32[:]) [sm_80] at this launch "
                     f"(typing, llvm, ptx, cubin; {lines[0].split('; ', 1)[1].split(')', 1)[0]}): "
                     "typing: global ALPHA 1.5 -> 3.0 (read by act)"]
    ip.run_cell("lazy_add[1, 1](out, x)")
    assert "gpukernel: compiled lazy_add (float32[::1], float32[::1]) [sm_80] at this launch" in capsys.readouterr().out
    cell(ip, "--sm 80 --quiet", '''
@cuda.jit("void(float32[:], float32[:])")
def quiet_apply(r, x):
    r[0] = act(x[0])
''')
    ip.run_cell("ALPHA = 4.0")
    ip.run_cell("quiet_apply[1, 1](out, x)")
    assert "at this launch" not in capsys.readouterr().out  # --quiet: no line at its launches either
    assert ip.user_ns["out"][0] == 0.0


def test_kernel_without_signature_compiles_at_first_launch_once_per_signature(ip):
    cell(ip, "--sm 80 --quiet", '''
from numba import cuda
import numpy as np
@cuda.jit
def double(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = 2 * x[i]
''')
    kernel = ip.user_ns["double"]
    assert kernel.results == {}
    with pytest.raises(gpucache_ext.LaunchError, match="not been compiled yet"):
        _ = kernel.ptx
    ip.run_cell("a = np.arange(4, dtype=np.float32); b = np.zeros(4, np.float32); double[1, 4](b, a)")
    np.testing.assert_allclose(ip.user_ns["b"], 2 * np.arange(4))
    ip.run_cell("double[1, 4](b, a)")
    ip.run_cell("c = np.arange(4, dtype=np.float64); d = np.zeros(4); double[1, 4](d, c)")
    assert len(kernel.results) == 2
    assert gpucache_ext.default_cache().stats()["typing"].misses == 2
    assert ".entry" in kernel.ptx and kernel.cubin[:4] == b"\x7fELF"


def test_sig_flag_gives_signatures_to_kernels_without_one(ip):
    cell(ip, "--sm 80 --quiet --sig 'void(float32[:], float32[:])' --sig 'void(float64[:], float64[:])'", '''
from numba import cuda
@cuda.jit
def copy(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i]
''')
    assert len(ip.user_ns["copy"].results) == 2


LAUNCH_AND_SHOW = AXPY + '''
x = np.arange(4, dtype=np.float32)
r = np.zeros_like(x)
axpy[1, 4](r, np.float32(2), x, x)
r'''


def test_the_last_expression_is_the_cells_result_as_in_a_plain_cell(ip, capsys):
    result = cell(ip, "--sm 80", LAUNCH_AND_SHOW, store_history=True)
    number = ip.execution_count - 1
    assert np.array_equal(result.result, [0, 3, 6, 9])
    assert ip.user_ns["Out"][number] is result.result and ip.user_ns["_"] is result.result
    out = capsys.readouterr().out
    # the report first, then the value, as IPython shows a cell's result
    assert "first compile of axpy" in out and out.rindex("array([0., 3., 6., 9.]") > out.index("axpy")


@pytest.mark.parametrize("ending", ["r;", "r  ;  # not shown", "r = r * 2", "print(r.sum())"])
def test_a_cell_without_a_final_expression_or_ending_in_a_semicolon_has_no_result(ip, capsys, ending):
    number = ip.execution_count
    result = cell(ip, "--sm 80 --quiet", LAUNCH_AND_SHOW.rsplit("\n", 1)[0] + "\n" + ending,
                  store_history=True)
    assert result.result is None and number not in ip.user_ns["Out"]
    assert ("18.0" in capsys.readouterr().out) == ending.startswith("print")


def test_kernel_inspection(ip):
    cell(ip, "--sm 80 --quiet", AXPY)
    kernel = ip.user_ns["axpy"]
    assert kernel.last.entry_name in kernel.ptx
    assert ".target sm_80" in kernel.ptx
    assert "define" in kernel.llvm_ir
    assert kernel.resources["registers"] > 0
    assert "resources sm_80:" in kernel.inspect()
    assert kernel.config.sm == 80


@pytest.mark.parametrize(
    "line, message",
    [
        # the values as a user types them at the magic: 86, sm_86; no Python tuple
        ("--sm 99", "--sm 99: this toolchain cannot compile for it; use one of \\d+, .*86.*"
                    "--sm 86 or --sm sm_86; several targets: --sm 80,86,90"),
        ("--sm abc", "--sm abc: not a compute capability"),
        ("--launch-bounds 2000", "--launch-bounds 2000: .*2000 threads per block is more than any GPU allows "
                                 "\\(1024\\)"),
        ("--launch-bounds 1025,2", "use at most 1024"),
        ("--fast-math", "unrecognized arguments: --fast-math \\(--fast-math: did you mean --fastmath\\?\\)"),
        ("--max_registers 32", "did you mean --max-registers"),
        ("--opt 7", "--opt 7: '7' is no optimisation level \\(0, 1, 2 or 3\\)"),
        ("--max-registers 0", "--max-registers 0"),
        # sweeps: each value of a list checked, each once
        ("--max-registers 32,abc", "--max-registers 32,abc: 'abc' is no register count \\(1-255\\) or none; "
                                   "list values as --max-registers 32,64,none"),
        ("--max-registers 32,,64", "--max-registers 32,,64: an empty value"),
        ("--fastmath on,maybe", "--fastmath on,maybe: 'maybe' is neither on nor off"),
        ("--fastmath off,off", "--fastmath off,off: 'off' is listed twice"),
        ("--opt 2,9", "--opt 2,9: '9' is no optimisation level"),
        ("--block 128,2000", "--block 128,2000: '2000' is out of range: a block has 1 to 1024 threads"),
        ("--block x", "--block x: 'x' is no number of threads"),
        ("--dynamic-shared 1M", "--dynamic-shared 1M: '1M' is no size in bytes"),
        ("--dynamic-shared 300K", "is out of range: a block has at most 256 KiB of shared memory"),
        ("--dynamic-shared 4K,8K", "--dynamic-shared 4K,8K: give one size"),
        ("--launch-bounds 12x", "--launch-bounds 12x"),
        ("--sig 'void(nonsense[:])'", "--sig"),
        ("--bogus", "unrecognized arguments: --bogus"),
        # several targets (a fatbin): each one supported, each once, the PTX target at most the lowest
        ("--sm 80,99", "--sm 80,99: sm 99: this toolchain cannot compile for it"),
        ("--sm 80,86,86", "sm_86 is listed twice"),
        ("--sm 80,86 --ptx 90", "--ptx 90: ptx='90' is invalid: compute_90 is above the lowest cubin target sm_80"),
        ("--sm 80,86 --ptx foo", "--ptx foo"),
    ],
)
def test_bad_flags_raise_usage_error_and_change_nothing(ip, line, message):
    cell(ip, "--sm 80 --quiet", AXPY)
    kernel = ip.user_ns["axpy"]
    names = set(ip.user_ns)
    stats = gpucache_ext.default_cache().stats()
    pattern = message if "\\" in message or ".*" in message else re.escape(message)
    with pytest.raises(UsageError, match=pattern) as raised:
        ip.run_cell_magic("gpukernel", line, "ran = True\n" + AXPY)
    assert "(8, 6)" not in str(raised.value)  # (a Python tuple is no way to write a flag)
    assert "ran" not in ip.user_ns and set(ip.user_ns) == names
    assert ip.user_ns["axpy"] is kernel
    assert gpucache_ext.default_cache().stats() == stats


def test_empty_cell_is_a_usage_error(ip):
    with pytest.raises(UsageError, match="needs a cell"):
        ip.run_cell_magic("gpukernel", "--sm 80", "   \n")


def test_exception_in_the_cell_fails_it_and_keeps_what_ran_before_it_as_a_plain_cell(ip):
    """A plain cell that raises keeps what it bound before the raise (numba's
    dispatcher too): so does a %%gpukernel cell; its declared signatures then
    compile at the kernel's first launch."""
    cell(ip, "--sm 80 --quiet", AXPY)
    kernel = ip.user_ns["axpy"]
    result = ip.run_cell("%%gpukernel --sm 86\n" + AXPY + "\nraise RuntimeError('boom')\n")
    assert not result.success and isinstance(result.error_in_exec, RuntimeError)
    again = ip.user_ns["axpy"]
    assert again is not kernel and isinstance(again, gpucache_ext.Kernel) and again.config.sm == 86
    args = (np.zeros(4, np.float32), np.float32(2), np.ones(4, np.float32), np.ones(4, np.float32))
    assert again.result_for(*args).config.sm == 86 and again.result_for(*args).signature == kernel.declared[0]


def test_typing_error_names_the_kernel_and_the_cell_line(ip):
    cell(ip, "--sm 80 --quiet", AXPY)
    kernel = ip.user_ns["axpy"]
    stats = gpucache_ext.default_cache().stats()
    result = ip.run_cell('''%%gpukernel --sm 80
from numba import cuda
@cuda.jit("void(float32[:])")
def broken(r):
    r[0] = not_defined_anywhere
''')
    error = result.error_in_exec  # numba's, chained to the CompileError naming the kernel
    assert type(error).__name__ == "TypingError" and "not_defined_anywhere" in str(error)
    compile_error = error.__cause__
    assert isinstance(compile_error, gpucache_ext.CompileError) and compile_error.stage == "typing"
    assert "broken" in str(compile_error) and "not_defined_anywhere" in str(compile_error)
    # lines as IPython numbers the cell: the magic's line is 1
    assert "line 4" in str(compile_error) and "def broken(r):" in str(compile_error)
    assert "broken" not in ip.user_ns and ip.user_ns["axpy"] is kernel
    after = gpucache_ext.default_cache().stats()
    assert all(after[s].entries == stats[s].entries for s in after)


def test_force_recompiles_every_stage(ip):
    cell(ip, "--sm 80 --quiet", AXPY)
    cell(ip, "--sm 80 --quiet --force", AXPY)
    result = ip.user_ns["axpy"].last
    assert all(not stage.hit for stage in result.stages.values())
    assert result.stages["cubin"].reasons == ("forced recompile",)


def test_explain_shows_token_components(ip, capsys):
    cell(ip, "--sm 80 --explain", AXPY)
    out = capsys.readouterr().out
    assert "typing token" in out and "signature" in out and "max_registers" in out


def test_report_has_text_and_html_forms(ip):
    from gpucache_ext.ipython.report import CellReport

    cell(ip, "--sm 80 --quiet", AXPY)
    report = CellReport(ip.user_ns["axpy"].results.values())
    text, page = repr(report), report._repr_html_()
    assert "axpy" in text and "MISS" in text and "first compile of axpy" in text
    assert "<table" in page and "gpucache-miss" in page and "<script" not in page


def test_gpucache_line_magic(ip, capsys):
    cell(ip, "--sm 80 --quiet", AXPY)
    table = ip.run_line_magic("gpucache", "")
    assert "typing" in repr(table) and "misses" in repr(table)
    assert ip.run_line_magic("gpucache", "stats").stats == gpucache_ext.default_cache().stats()
    ip.run_line_magic("gpucache", "explain axpy")
    assert "every stage hits" in capsys.readouterr().out
    ip.run_line_magic("gpucache", "clear typing")  # typed IR gone: a compile would not need it
    ip.run_line_magic("gpucache", "explain axpy")
    out = capsys.readouterr().out
    assert "every stage hits" in out and "typing misses" not in out
    ip.run_line_magic("gpucache", "clear ptx")
    assert gpucache_ext.default_cache().stats()["ptx"].entries == 0
    ip.run_line_magic("gpucache", "explain axpy")
    assert "ptx misses: entry was evicted or cleared" in capsys.readouterr().out
    ip.run_line_magic("gpucache", "clear")
    assert all(v.entries == 0 for v in gpucache_ext.default_cache().stats().values())
    for bad in ("clear sass", "explain", "explain nothing_here", "frobnicate"):
        with pytest.raises(UsageError):
            ip.run_line_magic("gpucache", bad)


def _disk_entries(folder, stage):
    return sorted(folder.glob(f"v1/{stage}/*/*.entry"))


def test_clear_drops_memory_alone_unless_the_persistent_tiers_are_named(ip, tmp_path, capsys, monkeypatch):
    """%gpucache clear STAGE leaves the disk tier (shared by every notebook
    using it) as it is; --tiers disk asks first, naming the tier and the
    entries it loses; without a prompt it needs --yes; a "no" deletes nothing."""
    from gpucache_ext.ipython.magic import clear_entries
    from gpucache_ext.ipython.session import current

    current(ip).configure_cache(directory=tmp_path)
    cell(ip, "--sm 80 --quiet", AXPY)
    cache = gpucache_ext.default_cache()
    on_disk = _disk_entries(tmp_path, "ptx")
    assert len(on_disk) == 1 and cache.stats()["ptx"].tiers["memory"].entries == 1
    capsys.readouterr()

    ip.run_line_magic("gpucache", "clear ptx")
    out = capsys.readouterr().out
    assert _disk_entries(tmp_path, "ptx") == on_disk  # the disk tier is as it was
    assert cache.stats()["ptx"].tiers["memory"].entries == 0
    assert "1 entry dropped from memory" in out and f"kept: 1 in disk ({tmp_path})" in out
    assert "--tiers disk clears them too" in out

    # naming the disk: no prompt here (pytest captures stdin), so it refuses and deletes nothing
    with pytest.raises(UsageError, match=r"1 entry from disk .*add --yes") as refused:
        ip.run_line_magic("gpucache", "clear ptx --tiers disk")
    assert str(tmp_path) in str(refused.value)
    assert _disk_entries(tmp_path, "ptx") == on_disk
    # asked, answered no: nothing deleted
    asked = []
    said = clear_entries(cache, ["ptx", "--tiers", "disk"], ask=lambda q: asked.append(q) or "n")
    assert said.startswith("nothing deleted") and _disk_entries(tmp_path, "ptx") == on_disk
    assert "Clear ptx from memory and disk" in asked[0] and "1 entry from disk" in asked[0]
    # answered yes: gone from the disk, and said so
    said = clear_entries(cache, ["ptx", "--tiers=disk"], ask=lambda q: "y")
    assert _disk_entries(tmp_path, "ptx") == [] and f"1 from disk ({tmp_path})" in said
    # --yes: no question (every stage; the other stages' entries go too)
    assert _disk_entries(tmp_path, "cubin")
    ip.run_line_magic("gpucache", "clear --tiers all --yes")
    assert not list(tmp_path.glob("v1/*/*/*.entry"))
    for bad, match in (("clear ptx --tiers", "needs a value"), ("clear ptx --tiers redis", "no 'redis' tier"),
                       ("clear ptx llvm", "'llvm' is not understood"), ("clear --force", "not understood")):
        with pytest.raises(UsageError, match=match):
            ip.run_line_magic("gpucache", bad)


def test_help_lists_the_flags(ip):
    doc = ip.find_cell_magic("gpukernel").__doc__
    for flag in ("--sm", "--opt", "--fastmath", "--no-ftz", "--max-registers", "--launch-bounds",
                 "--block", "--sig", "--force", "--explain", "--simulate", "--quiet"):
        assert flag in doc


def test_docs_flag_table_lists_every_flag(ip):
    """The flag table of docs/magic.md and the magic's own arguments stay in step."""
    import re
    from pathlib import Path

    from gpucache_ext.ipython.magic import GpuCacheMagics

    page = (Path(__file__).resolve().parent.parent / "docs" / "magic.md").read_text()
    table = "\n".join(line for line in page.splitlines() if line.startswith("| `--"))
    parser = GpuCacheMagics.gpukernel.parser
    flags = {option for action in parser._actions for option in action.option_strings
             if option.startswith("--") and option != "--help"}
    first_column = "\n".join(line.split("|")[1] for line in table.splitlines())
    documented = set(re.findall(r"--[a-z][a-z-]*", first_column))
    assert flags - documented == set(), "flags missing from the table in docs/magic.md"
    assert documented - flags == set(), "docs/magic.md documents flags the magic lacks"


def test_reload_and_unload(ip):
    ip.run_line_magic("reload_ext", "gpucache_ext")
    assert ip.find_cell_magic("gpukernel") is not None
    ip.run_line_magic("unload_ext", "gpucache_ext")
    assert ip.find_cell_magic("gpukernel") is None and ip.find_line_magic("gpucache") is None
    ip.run_line_magic("load_ext", "gpucache_ext")
    assert ip.find_cell_magic("gpukernel") is not None


def test_configuration_from_environment(ip, monkeypatch):
    from gpucache_ext.ipython.magic import GpuCacheMagics

    monkeypatch.setenv("GPUCACHE_SM", "75")
    monkeypatch.setenv("GPUCACHE_QUIET", "1")
    magics = GpuCacheMagics(shell=ip)
    assert magics.default_sm == "75" and magics.quiet is True
    assert magics.resolved_default_sm() == "75"
    monkeypatch.delenv("GPUCACHE_SM")
    if not gpucache_ext.backends.numba_cuda.launch.kernel.gpu_available():
        assert GpuCacheMagics(shell=ip).resolved_default_sm() == 86
    monkeypatch.setenv("GPUCACHE_SM", "sm_99")
    ip.run_line_magic("reload_ext", "gpucache_ext")  # settings are read when the magics are made
    with pytest.raises(UsageError, match="GPUCACHE_SM"):
        ip.run_cell_magic("gpukernel", "", AXPY)


# -- simulator launches against numpy -------------------------------------------

# The shared sample, with 4x4 tiles so that a small launch covers several tiles.
MATMUL = samples.MATMUL.replace("TPB = 16\n", "TPB = 4\n")
assert MATMUL != samples.MATMUL


@pytest.mark.smoke
def test_simulated_axpy_matches_numpy(ip):
    cell(ip, "--sm 80 --simulate --quiet", AXPY)
    rng = np.random.default_rng(0)
    x, y = rng.random(37, dtype=np.float32), rng.random(37, dtype=np.float32)
    r = np.zeros_like(x)
    ip.user_ns["axpy"][2, 32](r, np.float32(1.5), x, y)
    np.testing.assert_allclose(r, 1.5 * x + y, rtol=1e-6)


def test_simulated_tiled_matmul_matches_numpy(ip):
    cell(ip, f"--sm 86 --simulate --quiet --sig '{samples.MATMUL_SIG}'", MATMUL)
    rng = np.random.default_rng(1)
    a, b = rng.random((6, 5), dtype=np.float32), rng.random((5, 7), dtype=np.float32)
    c = np.zeros((6, 7), np.float32)
    ip.user_ns["matmul"][(2, 2), (4, 4)](a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert ip.user_ns["matmul"].resources["shared_bytes"] == 2 * 4 * 4 * 4


def test_simulated_atomic_reduction_matches_numpy(ip):
    sm = buildable((61, 75))[0]  # (CUDA 13: sm_75 and later)
    cell(ip, f"--sm {sm} --simulate --quiet --sig '{samples.TOTAL_SIG}'", samples.TOTAL)
    x = np.arange(50, dtype=np.float64)
    acc = np.zeros(1)
    ip.user_ns["total"][2, 32](acc, x)
    assert acc[0] == x.sum()
    assert "___numba_atomic_double_add" not in ip.user_ns["total"].llvm_ir  # sm_61 has native f64 add, as later ones


def test_launch_errors_are_clear(ip):
    cell(ip, "--sm 80 --quiet", AXPY)
    kernel = ip.user_ns["axpy"]
    with pytest.raises(gpucache_ext.LaunchError, match="axpy\\[blocks, threads\\]"):
        kernel(1, 2)
    # one signature: launched as numba launches it, without dispatch; a wrong count is refused
    with pytest.raises(gpucache_ext.LaunchError, match=r"axpy takes 4 arguments \(float32\[:\], float32"):
        kernel[1, 4](np.zeros(4, np.int32))
    listed = AXPY.replace('@cuda.jit("void(float32[:], float32, float32[:], float32[:])")',
                          '@cuda.jit(["void(float32[:], float32, float32[:], float32[:])"])')
    cell(ip, "--sm 80 --quiet", listed)  # a list of signatures: dispatched on the arguments
    with pytest.raises(gpucache_ext.LaunchError, match="no signature accepts"):
        ip.user_ns["axpy"][1, 4](np.zeros(4, np.int32))


def test_kernels_compile_the_same_whether_imports_share_their_cell(ip):
    cell(ip, "--sm 80 --quiet", AXPY)  # imports and kernel in one cell
    together = ip.user_ns["axpy"].last.stages["typing"].token
    body = AXPY.split("\n", 3)[3]  # the kernel alone; the imports came from the cell before
    assert "import" not in body
    cell(ip, "--sm 80 --quiet", body)
    apart = ip.user_ns["axpy"].last
    assert apart.stages["typing"].token == together and apart.hit


def test_imports_in_a_cell_bind_what_python_binds(ip):
    cell(ip, "--quiet", '''
import os.path
import numpy as np
import xml.etree.ElementTree as ET
from math import sqrt as root, pi
from numba import cuda, float32

def inner():
    import json
    return json
''')
    import math
    import os
    import xml.etree.ElementTree

    import numba.cuda

    ns = ip.user_ns
    assert ns["os"] is os and ns["np"] is np and ns["ET"] is xml.etree.ElementTree
    assert ns["root"] is math.sqrt and ns["pi"] == math.pi and ns["float32"] is numba.float32
    assert ns["cuda"] is numba.cuda and ns["inner"]().__name__ == "json"
    result = ip.run_cell("%%gpukernel --quiet\nfrom math import no_such_name\n")
    assert isinstance(result.error_in_exec, ImportError)
    assert "cannot import name 'no_such_name' from 'math'" in str(result.error_in_exec)
    cell(ip, "--quiet", "try:\n    from math import nothing_here\nexcept ImportError:\n    fallback = 1\n")
    assert ip.user_ns["fallback"] == 1


def test_the_magics_cache_uses_the_configured_directory(tmp_path, monkeypatch):
    from traitlets.config import Config

    shell = InteractiveShell.instance()
    shell.run_line_magic("unload_ext", "gpucache_ext")
    config = Config()
    config.GpuCacheMagics.cache_dir = str(tmp_path / "from-profile")
    config.GpuCacheMagics.redis_url = "redis://127.0.0.1:1/0"  # nothing listens: never contacted here
    monkeypatch.setattr(shell, "config", config)
    monkeypatch.setenv("GPUCACHE_SECRET", "s")
    try:
        shell.run_line_magic("load_ext", "gpucache_ext")
        cache = gpucache_ext.default_cache()
        assert [t.name for t in cache.tiers] == ["disk", "shared"]
        assert cache.tiers[0].directory == tmp_path / "from-profile"
        assert cache.tiers[1].url == "redis://127.0.0.1:1/0"
    finally:
        gpucache_ext.configure_default_cache()
        shell.run_line_magic("unload_ext", "gpucache_ext")
        monkeypatch.undo()
        shell.run_line_magic("load_ext", "gpucache_ext")
    # the session reads its settings once, when the extension loads
    loaded = gpucache_ext.default_cache()
    monkeypatch.setenv("GPUCACHE_DIR", str(tmp_path / "from-env"))
    assert gpucache_ext.default_cache() is loaded
    shell.run_line_magic("unload_ext", "gpucache_ext")
    try:
        shell.run_line_magic("load_ext", "gpucache_ext")
        assert gpucache_ext.default_cache().tiers[0].directory == tmp_path / "from-env"
    finally:
        shell.run_line_magic("unload_ext", "gpucache_ext")
    # without a session, plain Python's default cache follows the environment too
    gpucache_ext.defaults._default_cache = None
    assert gpucache_ext.default_cache().tiers[0].directory == tmp_path / "from-env"
    monkeypatch.setenv("GPUCACHE_DIR", "off")
    gpucache_ext.defaults._default_cache = None
    assert gpucache_ext.default_cache().tiers == []
    shell.run_line_magic("load_ext", "gpucache_ext")


@pytest.mark.parametrize("name, value, message", [
    ("GPUCACHE_REDIS_TTL", "soon", "GPUCACHE_REDIS_TTL='soon' is invalid"),
    ("GPUCACHE_REDIS_PREFIX", "team *", "GPUCACHE_REDIS_PREFIX='team \\*' is invalid"),
    ("GPUCACHE_SHARED_UNSIGNED", "maybe", "GPUCACHE_SHARED_UNSIGNED='maybe' is invalid"),
    ("GPUCACHE_SECRET_PREVIOUS", "old", "GPUCACHE_SECRET_PREVIOUS is set but GPUCACHE_SECRET is not"),
])
def test_a_bad_shared_tier_setting_stops_the_load_with_its_name_and_fix(ip, monkeypatch, name, value, message):
    ip.run_line_magic("unload_ext", "gpucache_ext")
    monkeypatch.setenv(name, value)
    try:
        with pytest.raises(UsageError, match=message):
            ip.run_line_magic("load_ext", "gpucache_ext")
        assert "gpukernel" not in ip.magics_manager.magics["cell"]  # nothing half loaded
    finally:
        monkeypatch.delenv(name)
        ip.run_line_magic("load_ext", "gpucache_ext")
    assert "gpukernel" in ip.magics_manager.magics["cell"]


def test_help_names_the_cell_magic_and_its_defaults_as_the_code_has_them(ip, monkeypatch):
    import re
    from pathlib import Path

    from gpucache_ext import CompileConfig

    text = ip.magics_manager.magics["cell"]["gpukernel"].__doc__
    assert re.search(r"^\s*%%gpukernel \[--sm SM\]", text, re.M), text[:200]
    # --sm: the GPU first, then the setting, then 86, as device.default_sm decides
    assert "default: the current GPU's, else GPUCACHE_SM, else 86" in " ".join(text.split())
    monkeypatch.setenv("GPUCACHE_SM", "75")  # settings are read when the extension loads
    ip.run_line_magic("unload_ext", "gpucache_ext")
    ip.run_line_magic("load_ext", "gpucache_ext")
    ip.run_cell("%%gpukernel --quiet\nfrom numba import cuda\n@cuda.jit('void(float32[:])')\n"
                "def one(r):\n    r[0] = 1.0\n").raise_error()
    assert ip.user_ns["one"].config.sm == 75
    # fma: on by default, with or without fastmath, in the help, the flag table of docs/magic.md and the config
    assert "contract multiply-add (default: on, with or without --fastmath)" in " ".join(text.split())
    page = (Path(__file__).resolve().parent.parent / "docs" / "magic.md").read_text()
    assert "contract multiply-add (default: on, with or without `--fastmath`)" in page
    assert CompileConfig(fastmath=True).nvvm_math()["fma"] is CompileConfig().nvvm_math()["fma"] is True


def test_the_reports_why_names_every_change_at_the_first_stage_it_reaches(ip):
    from gpucache_ext.ipython.report import CellReport

    cell(ip, "--sm 86 --quiet", AXPY)
    cell(ip, "--sm 80 --fastmath --quiet", AXPY)
    result = ip.user_ns["axpy"].last
    why = CellReport([result]).rows()[0]["why"]
    # fastmath first changes the lowered code, sm first the PTX; the fields that follow
    # fastmath (ftz, prec_div, prec_sqrt) are fastmath's doing and not repeated
    assert why == "llvm: fastmath False -> True; ptx: sm 86 -> 80"
    assert "sm 86 -> 80" in result.stages["ptx"].reasons and "ftz False -> True" in result.stages["ptx"].reasons
    cell(ip, "--sm 80 --fastmath --no-ftz --max-registers 32 --quiet", AXPY)
    why = CellReport([ip.user_ns["axpy"].last]).rows()[0]["why"]
    assert why == "ptx: ftz True -> False; cubin: max_registers None -> 32"


def test_launches_are_not_counted_as_lookups(ip):
    import gpucache_ext

    ip.user_ns["SCALE"] = 2.0
    cell(ip, "--sm 80 --quiet", AXPY.replace("a * x[i]", "a * x[i] * SCALE"))
    cache = gpucache_ext.default_cache()
    counted = {s: (v.hits, v.misses) for s, v in cache.stats().items()}
    assert counted["typing"] == (0, 1)
    launch = ("import numpy as np\nx = np.ones(4, np.float32)\nr = np.zeros(4, np.float32)\n"
              "axpy[1, 4](r, np.float32(1), x, x)")
    for _ in range(3):  # each a cell: the first launch after a cell re-checks the inputs
        ip.run_cell(launch).raise_error()
    stats = cache.stats()
    assert {s: (v.hits, v.misses) for s, v in stats.items()} == counted  # nothing looked up
    assert stats.launch_checks == 3
    assert list(ip.user_ns["r"]) == [3.0] * 4
    ip.run_cell("SCALE = 3.0").raise_error()  # an input changed: the launch compiles, and that counts
    ip.run_cell(launch).raise_error()
    assert list(ip.user_ns["r"]) == [4.0] * 4
    after = cache.stats()
    assert after["typing"].misses == 2 and after["cubin"].misses == 2 and after.launch_checks == 3


def test_report_html_keeps_each_type_and_config_field_whole():
    """The HTML report lets a line break only between arguments and between
    config fields (what the browser test measures at 900 to 1400 px)."""
    from gpucache_ext.keys.config import summary_fields
    from gpucache_ext.ipython.report import signature_pieces

    assert signature_pieces("(float32[:, :], int32, Record([('a', '<f4')]))") == [
        "float32[:, :]", "int32", "Record([('a', '<f4')])"]
    assert summary_fields("sm_86 fastmath=True launch_bounds=(128, 2)") == [
        "sm_86", "fastmath=True", "launch_bounds=(128, 2)"]
    assert summary_fields("sm_80,86 +ptx 80 max_registers=32") == ["sm_80,86 +ptx 80", "max_registers=32"]


SWEEP_KERNEL = """
from numba import cuda
import numpy as np

@cuda.jit("void(float32[:], float32[:])")
def act(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] * 2.0 + 1.0
"""


def test_a_sweep_compiles_each_combination_once_and_use_binds_another_without_compiling(ip):
    """--max-registers 32,none --fastmath off,on: four variants; typing once,
    llvm and ptx once per fastmath value, a cubin per combination; the
    first is bound; use() binds another from the cache; a value not swept is
    refused with the variants listed."""
    from gpucache_ext import ConfigError

    cache = gpucache_ext.default_cache()
    cell(ip, "--sm 86 --max-registers 32,none --fastmath off,on --block 128,256 --quiet", SWEEP_KERNEL)
    kernel = ip.user_ns["act"]
    assert {stage: counts.misses for stage, counts in cache.stats().items() if stage != "fatbin"} == \
        {"typing": 1, "llvm": 2, "ptx": 2, "cubin": 4}
    assert [(v.config.summary(), v.bound) for v in kernel.variants] == [
        ("sm_86 max_registers=32", True), ("sm_86", False), ("sm_86 fastmath=True max_registers=32", False),
        ("sm_86 fastmath=True", False)]
    assert all(len(v.results) == 1 for v in kernel.variants) and kernel.blocks == (128, 256)
    assert kernel.config.max_registers == 32 and not kernel.config.fastmath
    before = cache.stats()
    assert kernel.use(max_registers=None, fastmath=True) is kernel
    assert kernel.config.summary() == "sm_86 fastmath=True" and kernel.last.config == kernel.config
    assert {s: c.misses for s, c in cache.stats().items()} == {s: c.misses for s, c in before.items()}
    assert [v.config.summary() for v in kernel.variants if v.bound] == ["sm_86 fastmath=True"]
    ip.run_cell("x = np.arange(4, dtype=np.float32); out = np.zeros(4, np.float32); act[1, 4](out, x)")
    np.testing.assert_allclose(ip.user_ns["out"], np.arange(4) * 2.0 + 1.0)
    with pytest.raises(ConfigError, match="act has no variant sm_86 fastmath=True max_registers=64; its "
                                          "variants: sm_86 max_registers=32; sm_86; "):
        kernel.use(max_registers=64)
    assert kernel.config.summary() == "sm_86 fastmath=True"  # (nothing changed)


def test_adding_a_value_to_a_cached_sweep_compiles_only_what_it_must(ip):
    cache = gpucache_ext.default_cache()
    cell(ip, "--sm 86 --max-registers 32,none --quiet", SWEEP_KERNEL)
    before = {s: c.misses for s, c in cache.stats().items()}
    cell(ip, "--sm 86 --max-registers 32,64,none --quiet", SWEEP_KERNEL)
    after = {s: c.misses for s, c in cache.stats().items()}
    assert {s: after[s] - before[s] for s in after} == {"typing": 0, "llvm": 0, "ptx": 0, "cubin": 1, "fatbin": 0}
    assert len(ip.user_ns["act"].variants) == 3


def test_a_lazy_kernel_in_a_sweep_compiles_the_variant_it_launches(ip):
    cache = gpucache_ext.default_cache()
    cell(ip, "--sm 86 --max-registers 32,64 --quiet", SWEEP_KERNEL.replace(
        '@cuda.jit("void(float32[:], float32[:])")', "@cuda.jit"))
    kernel = ip.user_ns["act"]
    assert [(v.config.max_registers, v.bound, v.results) for v in kernel.variants] == [(32, True, {}), (64, False, {})]
    ip.run_cell("x = np.arange(4, dtype=np.float32); out = np.zeros(4, np.float32); act[1, 4](out, x)")
    assert cache.stats()["cubin"].misses == 1
    kernel.use(max_registers=64)
    ip.run_cell("act[1, 4](out, x)")
    assert cache.stats()["cubin"].misses == 2 and kernel.last.config.max_registers == 64
    np.testing.assert_allclose(ip.user_ns["out"], np.arange(4) * 2.0 + 1.0)
    assert [len(v.results) for v in kernel.variants] == [1, 1]


def test_a_sweeps_variants_table_gives_occupancy_per_architecture_and_marks_the_best(ip, capsys):
    """The tiled matmul over 2 targets and 3 register caps: a row per variant
    and architecture with the compile's own figures, its occupancy at each
    --block size as the calculator gives it, one best per architecture."""
    from gpucache_ext import samples
    from gpucache_ext.occupancy import occupancy

    capsys.readouterr()
    cell(ip, f"--sm 75,86 --max-registers none,32,16 --block 128,256 --sig '{samples.MATMUL_SIG}'", samples.MATMUL)
    out = capsys.readouterr().out
    head = "matmul: 3 variants; occupancy at 128, 256 threads a block (theoretical: not speed), * the best per"
    assert head in out
    table = out.split(head, 1)[1].splitlines()[1:]
    header = table[0].split()
    rows = [line for line in table[1:] if line.strip().startswith(("*", "sm_"))]
    # (occupancy right after the config: what the table is for, in view first)
    assert header[:3] == ["best", "arch", "config"] and header[3:7] == ["128", "threads", "256", "threads"]
    assert len(rows) == 6  # 3 variants x 2 architectures
    kernel = ip.user_ns["matmul"]
    figures = {}
    for variant in kernel.variants:
        (result,) = variant.results.values()
        for sm in (75, 86):
            each = result.per_target[sm]
            figures[(f"sm_{sm}", variant.config.max_registers)] = each.resources
    for line in rows:
        best = line.lstrip().startswith("*")
        raised = re.search(r" \(raised to (\d+) by ptxas\)", line)  # a cap below ptxas's floor
        words = line.replace("*", " ").replace(raised.group(0) if raised else "\0", "").split()
        arch, cap = words[0], None if words[1] == "defaults" else int(words[1].split("=")[1])
        assert (int(raised.group(1)) if raised else None) == (
            figures[(arch, cap)]["max_registers"] if cap and figures[(arch, cap)]["max_registers"] != cap else None)
        registers = figures[(arch, cap)]["registers"]
        assert int(words[6]) == registers, line
        for block, shown in zip((128, 256), (" ".join(words[2:4]), " ".join(words[4:6]))):
            found = occupancy((int(arch[3]), int(arch[4])), block, registers, figures[(arch, cap)]["shared_bytes"])
            assert shown.startswith(f"{round(found.occupancy * 100)}% "), (line, found)
        figures[(arch, cap)]["best"] = best
    for arch in ("sm_75", "sm_86"):  # one best per architecture: none spills where another does not
        marked = [cap for (where, cap), f in figures.items() if where == arch and f["best"]]
        assert len(marked) == 1, figures
        spilled = {cap: bool(f["spill_stores"]) for (where, cap), f in figures.items() if where == arch}
        assert not spilled[marked[0]] or all(spilled.values())
    assert "how the figures moved between variants one field apart:" in out


def test_a_multi_target_variant_names_every_target_it_is_built_for(ip):
    cell(ip, "--sm 80,86 --max-registers 32,none --quiet", SWEEP_KERNEL)
    kernel = ip.user_ns["act"]
    assert [v.summary() for v in kernel.variants] == ["sm_80,86 +ptx 80 max_registers=32", "sm_80,86 +ptx 80"]
    assert all(set(next(iter(v.results.values())).per_target) == {80, 86} for v in kernel.variants)
    with pytest.raises(gpucache_ext.ConfigError, match=r"no variant sm_80,86 \+ptx 80 max_registers=64; "
                                                       r"its variants: sm_80,86 \+ptx 80 max_registers=32; "):
        kernel.use(max_registers=64)
    cell(ip, "--sm 86 --quiet", SWEEP_KERNEL)
    assert [v.summary() for v in ip.user_ns["act"].variants] == ["sm_86"]


def test_dynamic_shared_memory_counts_in_the_variants_occupancy(ip, capsys):
    from gpucache_ext.occupancy import occupancy

    capsys.readouterr()
    cell(ip, "--sm 86 --max-registers none,32 --block 256 --dynamic-shared 48K", SWEEP_KERNEL)
    out = capsys.readouterr().out
    assert "occupancy at 256 threads a block with 49152 B dynamic shared memory" in out
    kernel = ip.user_ns["act"]
    assert kernel.dynamic_shared == 48 * 1024
    rows = [line for line in out.split("the best per architecture:", 1)[1].splitlines()[2:4]]
    for line, variant in zip(rows, kernel.variants):
        (result,) = variant.results.values()
        used = result.resources
        found = occupancy((8, 6), 256, used["registers"], used["shared_bytes"], 48 * 1024)
        limit = 'smem' if found.limited_by == 'shared memory' else found.limited_by
        assert "0 B + 48.0 KiB dyn" in line and f" {round(found.occupancy * 100)}% {limit} " in line, line
    assert found.limited_by == "shared memory"  # (what the 48 KiB a block does to an sm_86 SM)


def test_only_the_users_code_gets_kernels_from_the_cell_a_librarys_keep_numbas_meaning(ip, tmp_path, monkeypatch):
    """A module imported by the cell makes a kernel with cuda.jit at import:
    the user's own module (beside the notebook) gets a Kernel with the cell's
    flags; an installed library's stays numba's dispatcher, as without the
    magic, however it is bound."""
    import importlib
    import sys

    from numba.cuda.dispatcher import CUDADispatcher

    source = "from numba import cuda\n\n@cuda.jit\ndef k(r):\n    r[0] = 1\n"
    site, mine = tmp_path / "site-packages", tmp_path / "notebook"
    site.mkdir()
    mine.mkdir()
    (site / "their_kernels.py").write_text(source)
    (mine / "my_kernels.py").write_text(source)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(mine))
    importlib.invalidate_caches()
    try:
        cell(ip, "--sm 80 --quiet", "import their_kernels, my_kernels\nfrom their_kernels import k as theirs\n")
        assert isinstance(ip.user_ns["my_kernels"].k, Kernel)
        assert ip.user_ns["my_kernels"].k.config.sm == 80
        for value in (ip.user_ns["their_kernels"].k, ip.user_ns["theirs"]):
            assert isinstance(value, CUDADispatcher) and not isinstance(value, Kernel)
    finally:
        for name in ("their_kernels", "my_kernels"):
            sys.modules.pop(name, None)


def test_inspect_types_of_declared_and_lazy_kernels_shows_the_cells_source_with_types(ip, capsys):
    cell(ip, "--sm 80 --quiet", AXPY + "\n@cuda.jit\ndef lazy(r):\n    r[0] = r.size * 0.5\n")
    ip.run_cell("lazy[1, 1](np.zeros(2))").raise_error()
    capsys.readouterr()
    ip.run_cell("axpy.inspect_types(); lazy.inspect_types()").raise_error()
    shown = capsys.readouterr().out
    assert "r[i] = a * x[i] + y[i]" in shown and ":: array(float32, 1d, A)" in shown  # the declared kernel
    assert "r[0] = r.size * 0.5" in shown and ":: array(float64, 1d, C)" in shown  # the lazy one's variant


def test_gpucache_auto_runs_every_cell_that_defines_kernels_through_the_cache(ip, capsys):
    from numba.cuda.dispatcher import CUDADispatcher

    ip.run_line_magic("gpucache", "auto")
    result = ip.run_cell(AXPY.lstrip() + "\nx = np.ones(4, np.float32)\nr = np.zeros_like(x)\n"
                         "axpy[1, 4](r, np.float32(2), x, x)\nr", store_history=True)
    assert isinstance(ip.user_ns["axpy"], Kernel) and ip.user_ns["axpy"].config.sm == 86  # the default flags
    assert np.array_equal(result.result, [3, 3, 3, 3]) and "first compile of axpy" in capsys.readouterr().out
    assert ip.run_cell("y = 2\ny", store_history=True).result == 2  # a cell without kernels: as written
    # its lines numbered as written: the error at the user's line 3 of the cell
    number = ip.execution_count
    failed = ip.run_cell("@cuda.jit\ndef bad(r):\n    r[0] = 'text' + 1\nbad[1, 1](r)\n", store_history=True)
    shown = capsys.readouterr()
    assert type(failed.error_in_exec).__name__ == "TypingError"
    assert f"Cell In[{number}], line 3" in shown.out + shown.err
    # a cell's own %%gpukernel keeps its flags, and its numbering (the magic's line is line 1)
    cell(ip, "--sm 80 --quiet", AXPY)
    assert ip.user_ns["axpy"].config.sm == 80
    number = ip.execution_count
    ip.run_cell("%%gpukernel --sm 80\n@cuda.jit\ndef bad(r):\n    r[0] = 'text' + 1\nbad[1, 1](r)\n",
                store_history=True)
    shown = capsys.readouterr()
    assert f"Cell In[{number}], line 4" in shown.out + shown.err
    ip.run_line_magic("gpucache", "auto off")
    ip.run_cell("@cuda.jit\ndef plain(r):\n    r[0] = 1\n").raise_error()
    assert isinstance(ip.user_ns["plain"], CUDADispatcher) and not isinstance(ip.user_ns["plain"], Kernel)
    with pytest.raises(UsageError, match="auto"):
        ip.run_line_magic("gpucache", "auto maybe")


def test_gpucache_auto_from_the_setting(ip, monkeypatch):
    monkeypatch.setenv("GPUCACHE_AUTO", "1")
    ip.run_line_magic("reload_ext", "gpucache_ext")
    ip.run_cell("from numba import cuda\n@cuda.jit('void(float32[:])')\ndef k(r):\n    r[0] = 1\n").raise_error()
    assert isinstance(ip.user_ns["k"], Kernel)


@pytest.mark.parametrize("source, defines", [
    ("from numba import cuda\n@cuda.jit\ndef k(r): pass", True),
    ("import numba\n@numba.cuda.jit('void(int32[:])')\ndef k(r): pass", True),
    ("from numba.cuda import jit as j\n@j(device=True)\ndef f(x): return x", True),
    ("from numba import cuda\ndef f(r): pass\nk = cuda.jit(f)", True),
    ("%time x = 1\n@cuda.jit\ndef k(r): pass", True),  # IPython syntax in the cell
    ("import numba\n@numba.jit\ndef f(x): return x", False),  # numba's CPU jit
    ("cuda = object()\n@cuda.jit\ndef k(r): pass", True),  # (bound in the cell: read as written)
    ("x = 1\nprint(x)", False),
    ("def broken(:", False),
])
def test_which_cells_define_cuda_kernels(ip, source, defines):
    from gpucache_ext.ipython.auto import AutoCells, defines_cuda_kernels

    assert defines_cuda_kernels(AutoCells._python(source.splitlines(True)), {}) is defines


def test_a_name_cuda_bound_to_something_else_is_not_numbas(ip):
    from gpucache_ext.ipython.auto import defines_cuda_kernels

    assert not defines_cuda_kernels("@cuda.jit\ndef k(r): pass", {"cuda": object()})
    import numba.cuda

    assert defines_cuda_kernels("@gpu.jit\ndef k(r): pass", {"gpu": numba.cuda})


def test_a_failed_cell_keeps_nothing_of_the_namespace_alive(ip):
    """A cell's error is kept (``sys.last_value``; the next error's context),
    and with it the magic's frames: deleting an array after a failed
    %%gpukernel cell frees it, as after a plain cell."""
    import sys
    import weakref

    ip.run_cell("import numpy as np\nbig = np.zeros(1 << 20)")
    held = weakref.ref(ip.user_ns["big"])
    result = ip.run_cell("%%gpukernel --sm 86 --quiet\nfrom numba import cuda\nbefore_the_error = 1\n1 / 0")
    assert isinstance(result.error_in_exec, ZeroDivisionError) and sys.last_value is not None
    assert ip.user_ns["before_the_error"] == 1  # (what the cell bound stays bound, as in a plain cell)
    ip.run_cell("del big")
    assert held() is None  # (freed then, not at some later collection)
