"""gpucache explain, and show's "built" line: how a kernel's newest build went,
read from a disk cache (or the shared one) that real compiles filled, each
compile through a new `KernelCache` as a new process would make it.  The
command runs in this process (`cli.main`, the `gpucache_cli` fixture), once
as a subprocess."""

import pytest

from gpucache_ext import CompileConfig, KernelCache

from . import kernels
from .helpers import gpucache, reading, run_python

K_KERNEL = """
from numba import cuda

@cuda.jit
def kernel(r):
    r[0] = K
"""


def compile_into(directory, func, sig, **config):
    return KernelCache(directory=directory).compile(func, sig, CompileConfig(**config))


def axpy(directory, **config):
    return compile_into(directory, kernels.axpy, kernels.AXPY_SIG, **config)


def copy(directory, **config):
    return compile_into(directory, kernels.copy, kernels.COPY_SIG, **config)


def outcomes(build):
    return {step["stage"]: step["outcome"] for step in build["stages"]}


def test_a_flag_change_is_followed_upstream_to_its_root_cause(tmp_path, gpucache_cli):
    axpy(tmp_path, sm=86)
    result = axpy(tmp_path, sm=86, fastmath=True)
    text, _ = gpucache_cli("--dir", tmp_path, "explain", "axpy")
    assert "axpy (tests.kernels.axpy) sm_86: newest build" in text and "[sm_86 fastmath=True]" in text
    assert f"  cubin   built             {result.stages['cubin'].token[:12]} ptx input changed" in text
    assert "  why: cubin built because ptx input changed\n" in text
    assert "\n     <- ptx built because fastmath False -> True, ftz False -> True, llvm input changed" in text
    assert "\n     <- llvm built because fastmath False -> True\n" in text
    assert "  root cause: fastmath False -> True (llvm)" in text
    build, = gpucache_cli("--dir", tmp_path, "explain", "axpy", "--json")["builds"]
    assert outcomes(build) == {"typing": "built", "llvm": "built", "ptx": "built", "cubin": "built"}
    assert [link["stage"] for link in build["why"]] == ["cubin", "ptx", "llvm"]
    assert build["root_cause"] == {"stage": "llvm", "reasons": ["fastmath False -> True"]}
    # the same reasons the compile gave, word for word
    assert [step["reasons"] for step in build["stages"][1:]] == [
        list(result.stages[stage].reasons) for stage in ("llvm", "ptx", "cubin")]


def test_a_change_typing_read_roots_in_typing(tmp_path, gpucache_cli):
    for value in (2.5, 3.25):
        _, kernel = reading(K_KERNEL, K=value)
        compile_into(tmp_path, kernel.py_func, "void(float32[:])", sm=86)
    text, _ = gpucache_cli("--dir", tmp_path, "explain", "kernel")
    assert "     <- llvm built because typing input changed\n     <- typing built because global K 2.5 -> 3.25" in text
    assert "root cause: global K 2.5 -> 3.25 (typing)" in text
    _, kernel = reading(K_KERNEL.replace("= K", "= K + 1.0"), K=3.25)
    compile_into(tmp_path, kernel.py_func, "void(float32[:])", sm=86)
    build, = gpucache_cli("--dir", tmp_path, "explain", "kernel", "--json")["builds"]
    assert build["root_cause"] == {"stage": "typing", "reasons": ["code changed"]}


def test_a_field_only_the_cubin_reads_builds_the_cubin_alone(tmp_path, gpucache_cli):
    axpy(tmp_path, sm=86)
    first = axpy(tmp_path, sm=86, max_registers=64)
    axpy(tmp_path, sm=86, max_registers=32)  # right after another build in this process
    text, _ = gpucache_cli("--dir", tmp_path, "explain", "axpy")
    assert "  typing  not needed\n" in text and f"  ptx     hit               {first.stages['ptx'].token[:12]}" in text
    assert "why: cubin built because max_registers 64 -> 32\n  root cause: max_registers 64 -> 32 (cubin)" in text
    build, = gpucache_cli("--dir", tmp_path, "explain", "axpy", "--json")["builds"]
    assert outcomes(build) == {"typing": "not needed", "llvm": "hit", "ptx": "hit", "cubin": "built"}
    assert build["cutoffs"] == []


def test_an_early_cutoff_is_named(tmp_path, gpucache_cli):
    """On the copy kernel, opt 2 gives the PTX opt 3 gives (see test_cutoff.py)."""
    first = copy(tmp_path, sm=86)
    result = copy(tmp_path, sm=86, opt=2)
    assert result.stages["cubin"].cutoff  # (what the cell report says)
    text, _ = gpucache_cli("--dir", tmp_path, "explain", "copy")
    assert f"  cubin   hit (same bytes)  {first.stages['cubin'].token[:12]}" in text
    assert "root cause: opt 3 -> 2 (ptx)" in text
    assert "  early cutoff: ptx rebuilt (opt 3 -> 2), same bytes: cubin reused" in text
    build, = gpucache_cli("--dir", tmp_path, "explain", "copy", "--json")["builds"]
    assert outcomes(build) == {"typing": "not needed", "llvm": "hit", "ptx": "built", "cubin": "hit"}
    assert [step["cutoff"] for step in build["stages"]] == [False, False, False, True]
    assert build["cutoffs"] == [{"stage": "ptx", "reasons": ["opt 3 -> 2"], "reused": ["cubin"],
                                 "text": "ptx rebuilt (opt 3 -> 2), same bytes: cubin reused"}]
    # the same PTX again, and a cubin field: both built, the cubin for its own field
    copy(tmp_path, sm=86, opt=2, max_registers=32)
    copy(tmp_path, sm=86, opt=1, max_registers=16)
    build, = gpucache_cli("--dir", tmp_path, "explain", "copy", "--json")["builds"]
    assert outcomes(build) == {"typing": "not needed", "llvm": "hit", "ptx": "built", "cubin": "built"}
    assert build["stages"][2]["reasons"] == ["opt 2 -> 1"] and build["cutoffs"] == []
    assert build["root_cause"] == {"stage": "cubin", "reasons": ["max_registers 32 -> 16"]}


def test_a_first_compile_builds_every_stage(tmp_path, gpucache_cli):
    axpy(tmp_path, sm=86)
    text, _ = gpucache_cli("--dir", tmp_path, "explain", "axpy")
    assert "why: cubin, ptx and llvm built because first compile of axpy" in text
    assert "root cause: first compile of axpy (llvm)" in text


def test_sm_picks_the_targets(tmp_path, gpucache_cli):
    copy(tmp_path, sm=80)
    copy(tmp_path, sm=86)
    copy(tmp_path, sm=86, opt=2)
    text, _ = gpucache_cli("--dir", tmp_path, "explain", "copy")  # the newest build's target
    assert "copy (tests.kernels.copy) sm_86: newest build" in text and "copy (tests.kernels.copy) sm_80" not in text
    assert "also built for sm_80: gpucache explain copy --sm 80" in text
    only = gpucache_cli("--dir", tmp_path, "explain", "copy", "--sm", "80", "--json")["builds"]
    assert [b["sm"] for b in only] == [80] and only[0]["root_cause"]["reasons"] == ["first compile of copy"]
    for given in (["80", "86"], ["80,86"], ["sm_80", "8.6"]):
        builds = gpucache_cli("--dir", tmp_path, "explain", "copy", "--sm", *given, "--json")["builds"]
        assert [b["sm"] for b in builds] == [80, 86] and builds[1]["cutoffs"][0]["stage"] == "ptx"
    _, err = gpucache_cli("--dir", tmp_path, "explain", "copy", "--sm", "75", expect=2)
    assert "copy has no entries for sm_75" in err and "built for sm_80, sm_86" in err


def test_a_multi_target_build_after_another_finds_what_that_one_built(tmp_path, gpucache_cli):
    """The second fatbin's sm_86 cubin was compared with the sm_80 one just
    built ("ptx input changed"), yet its PTX is the first fatbin's: found."""
    for config in (CompileConfig(sm=80), CompileConfig(sm=80, max_registers=32)):
        KernelCache(directory=tmp_path).compile_fatbin(kernels.axpy, kernels.AXPY_SIG, config, sms=(80, 86))
    builds = gpucache_cli("--dir", tmp_path, "explain", "axpy", "--sm", "80", "86", "--json")["builds"]
    assert [outcomes(b) for b in builds] == [
        {"typing": "not needed", "llvm": "hit", "ptx": "hit", "cubin": "built"}] * 2
    assert builds[0]["root_cause"] == {"stage": "cubin", "reasons": ["max_registers None -> 32"]}
    # show follows no further: that PTX was built by the first fatbin, for its own reasons
    shown, _ = gpucache_cli("--dir", tmp_path, "show", builds[1]["stages"][3]["token"])
    assert "built     ptx input changed; sm 80 -> 86\nvalid" in shown


@pytest.mark.smoke
def test_an_unknown_name_exits_2_with_close_names(tmp_path):
    axpy(tmp_path, sm=86)
    copy(tmp_path, sm=86)
    done = gpucache("--dir", tmp_path, "explain", "axpyy", expect=2)
    assert "no kernel named 'axpyy'" in done.stderr and "(did you mean axpy?)" in done.stderr
    assert "Traceback" not in done.stderr and not done.stdout
    far = gpucache("--dir", tmp_path, "explain", "zzz", expect=2).stderr
    assert "(it holds axpy, copy)" in far and "gpucache ls lists the kernels" in far


def test_json_is_stable(tmp_path, gpucache_cli):
    axpy(tmp_path, sm=86)
    axpy(tmp_path, sm=86, fastmath=True)
    report = gpucache_cli("--dir", tmp_path, "--json", "explain", "axpy")
    assert set(report) == {"name", "tiers", "builds"} and report["name"] == "axpy"
    build, = report["builds"]
    assert set(build) == {"label", "kernel", "place", "sm", "signature", "config", "created", "age_seconds",
                          "stages", "why", "root_cause", "cutoffs", "other_targets"}
    assert [s["stage"] for s in build["stages"]] == ["typing", "llvm", "ptx", "cubin"]
    assert all(set(s) == {"stage", "outcome", "token", "tiers", "reasons", "cutoff", "note"} for s in build["stages"])
    assert build["stages"][1]["tiers"] == ["disk"] and build["stages"][0]["token"] is None
    again = gpucache_cli("--dir", tmp_path, "explain", "axpy", "--json")
    for one in (report, again):
        del one["builds"][0]["age_seconds"]
    assert again == report


def test_show_follows_the_built_line_to_the_root_cause(tmp_path, gpucache_cli):
    axpy(tmp_path, sm=86)
    result = axpy(tmp_path, sm=86, fastmath=True)
    ptx, llvm = result.stages["ptx"].token[:12], result.stages["llvm"].token[:12]
    text, _ = gpucache_cli("--dir", tmp_path, "show", result.stages["cubin"].token)
    assert (f"built     ptx input changed\n          <- ptx {ptx}: fastmath False -> True; ftz False -> True; "
            "llvm input changed; ") in text
    assert f"\n          <- llvm {llvm}: fastmath False -> True\nvalid     yes" in text
    shown = gpucache_cli("--dir", tmp_path, "show", result.stages["ptx"].token[:10], "--json")
    assert [(link["stage"], link["token"]) for link in shown["built_chain"]] == [
        ("ptx", result.stages["ptx"].token), ("llvm", result.stages["llvm"].token)]
    # an entry whose reasons name no stage before it: its own line, as before
    first = gpucache_cli("--dir", tmp_path, "show", axpy(tmp_path, sm=86).stages["cubin"].token)[0]
    assert "built     first compile of axpy\nvalid" in first


def test_an_entry_gone_from_the_chain_says_why(tmp_path, gpucache_cli):
    axpy(tmp_path, sm=86)
    result = axpy(tmp_path, sm=86, fastmath=True)
    assert KernelCache(directory=tmp_path).evict("ptx", result.stages["ptx"].token)
    text, _ = gpucache_cli("--dir", tmp_path, "explain", "axpy")
    assert (f"  ptx     gone              {result.stages['ptx'].token[:12]} no longer cached (evicted from the "
            "disk tier") in text
    assert "why: cubin built because ptx input changed\n  root cause: ptx input changed (cubin)" in text


def test_the_shared_cache_is_read(redis_server, gpucache_cli, monkeypatch):
    pytest.importorskip("redis")
    monkeypatch.setenv("GPUCACHE_SECRET", "team")
    for config in (CompileConfig(sm=86), CompileConfig(sm=86, fastmath=True)):
        KernelCache(redis_url=redis_server.url).compile(kernels.axpy, kernels.AXPY_SIG, config)
    # GPUCACHE_DIR=off in the tests: no disk cache, so the shared one alone
    report = gpucache_cli("--redis-url", redis_server.url, "explain", "axpy", "--json")
    assert len(report["tiers"]) == 1 and "redis://" in report["tiers"][0]
    build, = report["builds"]
    assert build["root_cause"] == {"stage": "llvm", "reasons": ["fastmath False -> True"]}
    assert build["stages"][3]["tiers"] == ["shared"]
    monkeypatch.delenv("GPUCACHE_SECRET")  # its entries are signed: a reader without the secret reads none
    _, err = gpucache_cli("--redis-url", redis_server.url, "explain", "axpy", expect=2)
    assert "the shared cache is not read" in err and "GPUCACHE_SECRET" in err


def test_explain_reads_headers_and_imports_no_numba(tmp_path):
    axpy(tmp_path, sm=86)
    report = run_python("""
        import contextlib, io, json, sys
        from gpucache_ext import cli
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = cli.main(["--dir", sys.argv[1], "explain", "axpy", "--json"])
        print(json.dumps({"status": status, "builds": len(json.loads(out.getvalue())["builds"]),
                          "numba": sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "IPython"))}))
        """, tmp_path, json_line=True)
    assert report == {"status": 0, "builds": 1, "numba": []}
