"""The proof of the launch path without a GPU: numba-cuda's own uncached
dispatcher, ``gpucache_ext.jit`` and ``%%gpukernel`` make the same driver
calls, on one fake device and on two of different architectures.

Every launch form of `tests/launch_forms.py`, and every one of numba-cuda's
documentation examples (run until its own check of the numbers, which the
stand-in computes none of), runs in a fresh process under
the recording stand-in driver (`tests/fakecuda`) three ways.  The traces must
be equal call for call — allocations, copies, memsets, loads, lookups,
attribute sets (the carveout), launches with grid, block, dynamic shared
memory, stream, cooperative flag and marshalled parameter bytes — except for
what the cache changes on purpose: the image loaded is the cached artifact
(numba compiles for sm_90a with LTO by default, the cache for sm_90; its
names are numbered deterministically), so image bytes and kernel names are
compared by their order of appearance, and each image loaded is checked to
be the cached artifact itself.  A second process that hits on disk makes
exactly the calls of the cold one, image bytes included.

All of that is `slow` (one process per way, every form compiled in each); the
quick sample traces one form, numba's way and the magic's, on one device.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from . import fakecuda
from .launch_forms import FORMS


SCRIPT = str(Path(__file__).with_name("launch_forms.py"))
LOADS = ("cuLibraryLoadData", "cuModuleLoadData", "cuModuleLoadDataEx")
DEVICES = {"one device": ("9.0",), "two devices": ("9.0", "8.0")}


@pytest.fixture(scope="module", autouse=True)
def stand_in():
    reason = fakecuda.skip_reason()
    if reason:
        pytest.skip(reason)


def traced(mode: str, cc, cache_dir: Path, images: Path | None = None, forms=(*FORMS, "docs"), flags=""):
    env = {"GPUCACHE_DIR": str(cache_dir), "LAUNCH_FORMS_FLAGS": flags}
    if images is not None:
        env["LAUNCH_FORMS_IMAGES"] = str(images)
    done = fakecuda.run(SCRIPT, cc=cc, args=[mode, *forms], env=env)
    shown = "\n".join(line for line in done.stderr.splitlines() if "Warning" not in line and "warn(" not in line)
    assert done.returncode == 0, f"{mode} failed ({done.returncode}):\n{shown[-4000:]}"
    return done.calls


def comparable(calls):
    """`calls` with images by kind and architecture, and kernel names (also
    inside symbol names: ``<entry>__errcode__``) by the load that brought
    them, in order: numba names every compile anew, the cache names the same
    kernel alike (a specialization loads the same name again)."""
    every = sorted({name for call in calls for name in call["args"].get("entries", ())
                    if name.startswith("_Z")}, key=len, reverse=True)
    pattern = re.compile("|".join(map(re.escape, every))) if every else None
    names, loads = {}, 0

    def rename(value):
        if isinstance(value, str) and pattern is not None:
            return pattern.sub(lambda m: names.get(m.group(0), m.group(0)), value)
        if isinstance(value, list):
            return [rename(v) for v in value]
        return value

    out = []
    for call in calls:
        if call["call"] in LOADS:
            loads += 1
            names.update({name: f"kernel#{loads}.{i}" for i, name in enumerate(call["args"].get("entries", ()))
                          if name.startswith("_Z")})
        args = {key: rename(value) for key, value in call["args"].items()}
        if call["call"] in LOADS:
            args = {key: value for key, value in args.items() if key not in ("sha256", "size")}
            args["entries"] = [e for e in args.get("entries", ()) if e.startswith("kernel#")]
            args["entries"] = len(args["entries"])
        out.append({"call": call["call"], "args": args})
    return _frees_sorted(out)


def _frees_sorted(calls):
    """`calls` with each run of consecutive ``cuMemFree`` calls by address:
    numba frees what the garbage collector finalised, in the order it did,
    which follows when collections ran (they run when enough was allocated,
    which a compile and a disk hit differ in), not what the program did."""
    out, run = [], []
    for call in calls + [None]:
        if call is not None and call["call"] == "cuMemFree":
            run.append(call)
            continue
        out += sorted(run, key=lambda c: (c["args"].get("address", 0), c["args"].get("size", 0)))
        run = []
        if call is not None:
            out.append(call)
    return out


def numbas_own(load) -> bool:
    """Whether a load brings a kernel numba-cuda compiled itself (a CUDA ufunc's,
    in a script with ``gpucache_ext.jit``, which leaves ``numba.cuda.jit`` as it is):
    numba names those with a process-wide counter, so their bytes vary with how
    much numba compiled before in the process (less where the cache hit)."""
    return any("__vectorized_" in name or "__gufunc_" in name for name in load.get("entries", ()))


def first_difference(expected, got) -> str:
    for index, (a, b) in enumerate(zip(expected, got)):
        if a != b:
            return f"call {index}:\n  numba: {json.dumps(a)[:600]}\n  ours:  {json.dumps(b)[:600]}"
    return f"{len(expected)} calls from numba, {len(got)} from ours"


@pytest.fixture(scope="module", params=list(DEVICES), ids=list(DEVICES))
def runs(request, tmp_path_factory):
    cc = DEVICES[request.param]
    root = tmp_path_factory.mktemp(request.param.replace(" ", "_"))
    numba = traced("numba", cc, root / "unused")
    jit = traced("jit", cc, root / "jit", images=root / "jit.json")
    magic = traced("magic", cc, root / "magic", images=root / "magic.json")
    return {"cc": cc, "root": root, "numba": numba, "jit": jit, "magic": magic}


@pytest.mark.parametrize("mode", ["jit", "magic"])
@pytest.mark.slow
def test_the_same_driver_calls_as_numbas_own_dispatcher(runs, mode):
    expected, got = comparable(runs["numba"]), comparable(runs[mode])
    assert expected == got, first_difference(expected, got)


@pytest.mark.slow
def test_the_forms_reach_what_they_are_meant_to(runs):
    calls = runs["magic"]
    launches = [c["args"] for c in calls if c["call"].startswith("cuLaunch")]
    assert any(launch.get("cooperative") for launch in launches)  # grid sync
    assert any(launch.get("shared_mem") == 32 * 4 for launch in launches)  # dynamic shared memory
    assert any(launch.get("stream", "default") != "default" for launch in launches)  # a stream
    assert any(c["call"].endswith("SetAttribute") and c["args"].get("value") == 100 for c in calls)  # MaxShared
    assert any(c["call"] in ("cuLibraryGetGlobal", "cuModuleGetGlobal") and "__errcode__" in c["args"]["name"]
               for c in calls)  # the debug kernel's exception check
    devices = {launch.get("device") for launch in launches}
    assert devices == set(range(len(runs["cc"])))


@pytest.mark.parametrize("mode", ["jit", "magic"])
@pytest.mark.slow
def test_what_is_loaded_is_the_cached_artifact(runs, mode):
    held = json.loads((runs["root"] / f"{mode}.json").read_text())
    handed = {sha for variant in held for sha in variant["loaded"].values()}
    # (under the magic every kernel is the cache's, the CUDA ufuncs' too)
    loaded = [c["args"] for c in runs[mode] if c["call"] in LOADS and not (mode == "jit" and numbas_own(c["args"]))]
    assert loaded and {load["sha256"] for load in loaded} <= handed
    for variant in held:  # on a GPU of the compiled target, the artifact itself
        target = f"{variant['sm'] // 10}.{variant['sm'] % 10}"
        if target in variant["loaded"]:
            assert variant["loaded"][target] == variant["artifact"], variant["entry"]
    if len(runs["cc"]) > 1:  # the second GPU's architecture was compiled for it
        assert any(len(variant["loaded"]) > 1 for variant in held)


@pytest.mark.slow
def test_a_new_process_that_hits_on_disk_makes_the_same_calls(runs):
    again = traced("jit", runs["cc"], runs["root"] / "jit")
    expected, got = comparable(runs["jit"]), comparable(again)
    assert got == expected, first_difference(expected, got)

    def images(calls):  # the cache's loads, bytes included (numba's own: see numbas_own)
        return [c["args"] for c in calls if c["call"] in LOADS and not numbas_own(c["args"])]

    assert images(again) == images(runs["jit"])


@pytest.mark.parametrize("flags, kind", [("--sm 80", "ptx"), ("--sm 80,90", "fatbin"), ("--sm 90", "cubin")])
@pytest.mark.slow
def test_a_pinned_target_loads_ptx_or_a_fatbin_and_launches_as_numba_does(tmp_path, flags, kind):
    """On an sm_90 GPU: the PTX of --sm 80 (the driver compiles it), the fatbin
    of --sm 80,90, the cubin of --sm 90; every other call as numba's."""
    forms = ("samples", "streams_shared_configure")
    expected = comparable(traced("numba", ("9.0",), tmp_path / "unused", forms=forms))
    calls = traced("magic", ("9.0",), tmp_path / "cache", forms=forms, flags=flags)
    assert {c["args"]["kind"] for c in calls if c["call"] in LOADS} == {kind}
    got = comparable(calls)
    for call in got:
        if call["call"] in LOADS:
            call["args"].update(kind="cubin", arch=90)
            call["args"].pop("member", None)
    assert expected == got, first_difference(expected, got)


def test_one_form_makes_the_driver_calls_of_numbas_own_dispatcher(tmp_path):
    """The quick sample: a kernel with dynamic shared memory launched on a
    stream and through configure(), numba's way and through %%gpukernel."""
    forms = ("streams_shared_configure",)
    with ThreadPoolExecutor(2) as pool:  # two processes at once
        numba = pool.submit(traced, "numba", ("9.0",), tmp_path / "unused", forms=forms)
        magic = pool.submit(traced, "magic", ("9.0",), tmp_path / "magic", images=tmp_path / "magic.json",
                            forms=forms)
        numba, magic = numba.result(), magic.result()
    expected, got = comparable(numba), comparable(magic)
    assert expected == got, first_difference(expected, got)
    launches = [c["args"] for c in magic if c["call"].startswith("cuLaunch")]
    assert len(launches) == 2 and {launch.get("shared_mem") for launch in launches} == {32 * 4, 64 * 4}
    held = json.loads((tmp_path / "magic.json").read_text())
    loaded = [c["args"] for c in magic if c["call"] in LOADS]
    assert loaded and {load["sha256"] for load in loaded} <= {sha for v in held for sha in v["loaded"].values()}


# a notebook's worth of kernels in a stand-in process (the quick run has
# test_one_form_makes_the_driver_calls_of_numbas_own_dispatcher)
@pytest.mark.slow
def test_numbas_own_kernels_in_a_cell_make_numbas_calls_and_go_through_the_cache(tmp_path):
    """CUDA ufuncs (vectorize, guvectorize) and cuda.reduce call cuda.jit
    themselves: in a %%gpukernel cell they make numba's driver calls, with
    every kernel they launch loaded from the cache (the guvectorize kernel and
    the reduction's in the cell's report, the vectorize kernel at its first
    call); run again in a new process, all of them hit on disk."""
    forms = ("ufuncs_and_reduce",)
    env = {"GPUCACHE_DIR": str(tmp_path / "magic"), "LAUNCH_FORMS_IMAGES": str(tmp_path / "magic.json"),
           "LAUNCH_FORMS_REPORT": "1"}
    with ThreadPoolExecutor(2) as pool:
        numba = pool.submit(traced, "numba", ("9.0",), tmp_path / "unused", forms=forms)
        shown = pool.submit(fakecuda.run, SCRIPT, cc=("9.0",), args=["magic", *forms], env=env)
        numba, shown = numba.result(), shown.result()
    assert shown.returncode == 0, shown.stderr[-4000:]
    magic = shown.calls
    expected, got = comparable(numba), comparable(magic)
    assert expected == got, first_difference(expected, got)
    for kernel in ("gpu_reduce_block_strided", "__gufunc_prefix"):  # rows of the cell's report
        assert re.search(rf"^{kernel} .* MISS", shown.stdout, re.M), shown.stdout
    assert "vadd: a CUDA ufunc, its kernels compile at its first call, per argument types" in shown.stdout
    assert re.search(r"compiled __vectorized_vadd \(float32.*at this launch", shown.stdout), shown.stdout
    assert "compiled by numba-cuda itself" not in shown.stdout
    held = json.loads((tmp_path / "magic.json").read_text())
    names = sorted(variant["entry"] for variant in held)
    assert len(names) == 3 and all(any(kernel in name for name in names) for kernel in
                                   ("__gufunc_prefix", "__vectorized_vadd", "gpu_reduce_block_strided")), names
    loads = [c["args"] for c in magic if c["call"] in LOADS]
    cached = {sha for variant in held for sha in variant["loaded"].values()}
    assert len(loads) == 3 and all(load["sha256"] in cached for load in loads), loads

    again = fakecuda.run(SCRIPT, cc=("9.0",), args=["magic", *forms], env=env)
    assert again.returncode == 0, again.stderr[-4000:]
    assert comparable(again.calls) == expected, first_difference(expected, comparable(again.calls))
    for kernel in ("gpu_reduce_block_strided", "__gufunc_prefix"):
        row = re.search(rf"^{kernel} .*$", again.stdout, re.M)
        assert row and "MISS" not in row.group(0) and "hit:disk" in row.group(0), again.stdout
    assert "compiled __vectorized_vadd" not in again.stdout  # (a hit at the launch prints nothing)
    assert [c["args"]["sha256"] for c in again.calls if c["call"] in LOADS] == [load["sha256"] for load in loads]

