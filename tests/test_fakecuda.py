"""The recording stand-in for the CUDA driver (tests/fakecuda) under plain
numba-cuda, without a GPU.  Skips only when no C compiler is available."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import fakecuda

SAMPLES = Path(fakecuda.__file__).resolve().parent / "samples"
LAUNCHES = ("cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel")


@pytest.fixture(scope="module")
def built():
    try:
        return fakecuda.build()
    except fakecuda.CompilerMissing as exc:
        pytest.skip(exc.reason)


def result_of(res) -> dict:
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    assert res.returncode == 0, res.stderr[-4000:]
    assert lines, res.stdout + res.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT ") :])


def launches_of(res, fragment: str) -> list[dict]:
    """Launches of the kernel whose mangled name contains ``fragment``."""
    return [c["args"] for c in res.calls if c["call"] in LAUNCHES and fragment in c["args"]["name"]]


def params(launch: dict) -> bytes:
    return bytes.fromhex(launch["params"])


def index_of(res, pred) -> int:
    return next(i for i, c in enumerate(res.calls) if pred(c))


@pytest.fixture(scope="module")
def features(built):
    return fakecuda.run(SAMPLES / "numba_features.py")


@pytest.fixture(scope="module")
def two_devices(built):
    return fakecuda.run(SAMPLES / "numba_two_devices.py", cc=("9.0", "8.0"))


# ---------------------------------------------------------------- numba


def test_features_script_runs(features):
    out = result_of(features)
    assert out["roundtrip"] is True
    # every image numba loads is a cubin for the one 9.0 device
    loads = features.of("cuLibraryLoadData")
    assert loads and {(x["kind"], x["arch"], x["device"]) for x in loads} == {("cubin", 90, 0)}
    assert not features.of("cuModuleLoadData")


def test_numpy_argument_auto_transfer(features):
    first = launches_of(features, "3add")[0]
    assert first["grid"] == [1, 1, 1] and first["block"] == [16, 1, 1]
    assert first["stream"] == "default" and first["cooperative"] is False
    # numba 0.30 allocates the argument's device copy through cuda.core's pool
    alloc = features.of("cuMemAllocFromPoolAsync")[0]
    assert alloc["size"] == 64 and alloc["device"] == 0
    h2d = features.of("cuMemcpyHtoDAsync")[0]
    assert h2d["dst"] == alloc["address"]
    assert bytes.fromhex(h2d["bytes"]) == np.arange(16, dtype=np.float32).tobytes()
    p = params(first)
    assert struct.pack("<Q", alloc["address"]) in p
    assert p.endswith(struct.pack("<f", 1.0))
    i_launch = index_of(features, lambda c: c["call"] in LAUNCHES)
    i_back = index_of(features, lambda c: c["call"] == "cuMemcpyDtoH")
    assert i_back > i_launch and features.calls[i_back]["args"]["src"] == alloc["address"]


def test_device_array_round_trip(features):
    out = result_of(features)
    ptr = out["d_ptr"]
    (alloc,) = [a for a in features.of("cuMemAlloc") if a["address"] == ptr]
    assert alloc["size"] == 128
    h2d = [c for c in features.of("cuMemcpyHtoD") if c["dst"] == ptr][0]
    assert bytes.fromhex(h2d["bytes"]) == np.arange(32, dtype=np.int32).tobytes()
    int_add = launches_of(features, "3addB2v2")
    assert int_add[0]["block"] == [32, 1, 1]
    # the array is passed as its 7 fields; field 4 (data) is the allocation
    assert params(int_add[0])[32:40] == struct.pack("<Q", ptr)
    assert params(int_add[0])[-8:] == struct.pack("<q", 3)
    assert any(c["src"] == ptr and c["size"] == 128 for c in features.of("cuMemcpyDtoH"))


def test_scalar_arguments(features):
    (launch,) = launches_of(features, "7scalars")
    assert launch["param_sizes"] == [8] * 7 + [4, 8, 4, 8, 8, 8, 1]
    tail = struct.pack("<i4xqf4xddd?", -7, 1 << 40, 1.5, 2.25, 3.0, 4.0, True)
    assert params(launch)[56:] == tail
    assert params(launch)[32:40] == struct.pack("<Q", result_of(features)["res_ptr"])


def test_record_argument(features):
    (launch,) = launches_of(features, "4reck")
    rec_dt = np.dtype([("x", np.int32), ("y", np.float64)], align=True)
    rec = np.zeros(1, dtype=rec_dt)
    rec[0]["x"], rec[0]["y"] = 5, 6.5
    copies = [c for c in features.of("cuMemcpyHtoDAsync") if bytes.fromhex(c["bytes"]) == rec.tobytes()]
    assert len(copies) == 1
    # the record travels by reference: the last parameter is its device copy
    assert params(launch)[-8:] == struct.pack("<Q", copies[0]["dst"])


def test_explicit_stream(features):
    (created,) = features.of("cuStreamCreate")
    on_stream = [x for x in launches_of(features, "3add") if x["stream"] == created["handle"]]
    assert len(on_stream) == 1
    assert on_stream[0]["grid"] == [2, 1, 1] and on_stream[0]["block"] == [32, 1, 1]


def test_dynamic_shared_memory(features):
    (launch,) = launches_of(features, "3dyn")
    assert launch["shared_mem"] == 256 and launch["block"] == [64, 1, 1]


def test_cooperative_launch(features):
    (launch,) = launches_of(features, "4coop")
    assert launch["cooperative"] is True
    assert [2, "01000000000000000000000000000000"] in launch["attrs"]  # CU_LAUNCH_ATTRIBUTE_COOPERATIVE
    assert launch["grid"] == [2, 1, 1]
    # 32-thread blocks: capped at 32 blocks/SM x 132 SMs (see fakecuda.c occupancy)
    assert result_of(features)["max_coop_blocks"] == 32 * 132
    (load,) = [x for x in features.of("cuLibraryLoadData") if any("4coop" in e for e in x["entries"])]
    assert len(load["entries"]) > 1  # linked with cudadevrt


def test_forall_specialize_configure(features):
    adds = launches_of(features, "3add")
    forall = [x for x in adds if params(x)[-8:] == struct.pack("<q", 2)]
    assert len(forall) == 1 and forall[0]["grid"][0] * forall[0]["block"][0] >= 1000
    spec = [x for x in adds if params(x)[-8:] == struct.pack("<q", 5)]
    assert len(spec) == 1 and spec[0]["grid"] == [3, 1, 1] and spec[0]["block"] == [64, 1, 1]
    conf = [x for x in adds if params(x)[-8:] == struct.pack("<q", 6)]
    assert len(conf) == 1 and conf[0]["grid"] == [4, 1, 1] and conf[0]["block"] == [128, 1, 1]


def test_debug_kernel_error_check(features):
    (launch,) = launches_of(features, "3dbg")
    (glob,) = features.of("cuLibraryGetGlobal")
    assert glob["name"].endswith("__errcode__") and glob["result"] == 0 and glob["size"] == 4
    i_launch = index_of(features, lambda c: c["call"] in LAUNCHES and "3dbg" in c["args"]["name"])
    after = features.calls[i_launch + 1]
    assert after["call"] == "cuMemcpyDtoH" and after["args"]["src"] == glob["address"]


def test_shared_memory_carveout(features):
    (launch,) = launches_of(features, "5carve")
    (attr,) = features.of("cuKernelSetAttribute")
    assert attr["attribute"] == 9 and attr["value"] == 100  # PREFERRED_SHARED_MEMORY_CARVEOUT
    assert attr["handle"] == launch["function"]
    i_set = index_of(features, lambda c: c["call"] == "cuKernelSetAttribute")
    i_launch = index_of(features, lambda c: c["call"] in LAUNCHES and "5carve" in c["args"]["name"])
    assert i_set < i_launch


def test_signature_declared_kernel(features):
    (launch,) = launches_of(features, "3sig")
    assert params(launch)[-8:] == struct.pack("<q", 42)


@pytest.mark.slow
def test_same_program_same_trace(features, built):
    again = fakecuda.run(SAMPLES / "numba_features.py")
    assert again.returncode == 0

    def masked(res):
        # numba links a kernel's libraries from a set: with >1 linked library
        # (the cg kernel + cudadevrt) the cubin's symbol order, hence its hash,
        # varies run to run.  Everything else must match byte for byte.
        out = []
        for c in res.calls:
            if c["call"] == "cuLibraryLoadData" and len(c["args"]["entries"]) > 1:
                c = json.loads(json.dumps(c))
                c["args"]["sha256"] = "*"
            out.append(json.dumps(c))
        return out

    assert masked(again) == masked(features)
    assert [ln for ln in again.trace_lines if '"entries":[' not in ln] == [
        ln for ln in features.trace_lines if '"entries":[' not in ln
    ]


@pytest.mark.slow
def test_two_devices(two_devices, built):
    out = result_of(two_devices)
    assert out["ngpus"] == 2 and out["cc"] == [[9, 0], [8, 0]]
    loads = two_devices.of("cuLibraryLoadData")
    assert [(x["device"], x["arch"]) for x in loads] == [(0, 90), (1, 80)]
    l0, l1 = two_devices.launches()
    assert l0["device"] == 0 and l1["device"] == 1
    assert l1["grid"] == [2, 1, 1] and l1["block"] == [4, 1, 1]
    assert params(l1)[32:40] == struct.pack("<Q", out["ptr1"])
    assert out["ptr1"] >= 0x200000000000 + (64 << 30) > out["ptr0"] >= 0x200000000000
    again = fakecuda.run(SAMPLES / "numba_two_devices.py", cc="9.0,8.0")
    assert again.trace_lines == two_devices.trace_lines


# ------------------------------------------------------- raw driver calls


@pytest.mark.slow
def test_images_and_raw_launches(built):
    res = fakecuda.run(SAMPLES / "raw_driver.py", cc=("9.0", "8.0"))
    out = result_of(res)
    loads = res.of("cuModuleLoadData")
    kinds = [(x["kind"], x.get("member"), x["device"], x.get("arch"), x.get("error")) for x in loads]
    assert kinds == [
        ("ptx", None, 0, 90, None),
        ("cubin", None, 0, 90, None),
        ("fatbin", "cubin", 0, 90, None),
        ("fatbin", "ptx", 1, 80, None),  # LZ4-compressed PTX member
        ("cubin", None, 1, 90, 209),  # CUDA_ERROR_NO_BINARY_FOR_GPU
        ("ltoir", None, 0, None, 200),  # CUDA_ERROR_INVALID_IMAGE
    ]
    assert out["cubin90_on_80"] == 209 and out["ltoir"] == 200
    launches = res.launches()
    # PTX-derived and cubin-derived parameter layouts agree
    assert len({x["params"] for x in launches[:4]}) == 1
    assert launches[0]["param_sizes"] == [8] * 7 + [4]
    assert params(launches[0])[32:40] == struct.pack("<Q", out["dptr"])
    assert [x["device"] for x in launches[:4]] == [0, 0, 0, 1]
    extra = launches[4]
    assert extra["extra"] is True and len(params(extra)) == 64 and extra["grid"] == [5, 1, 1]
    assert out["regs_cubin"] == out["regs_fatbin"] > 0
    # occupancy: 256 threads -> min(2048/256, 65536/(regs*256), 32) blocks/SM
    assert out["occupancy"][0] == min(2048 // 256, 65536 // (out["regs_cubin"] * 256), 32)
    assert out["occupancy"][2] == 1024
    coop = res.of("cuLaunchCooperativeKernel")[0]
    assert coop["cooperative"] is True and coop["shared_mem"] == 128 and coop["block"] == [64, 1, 1]
    assert params(coop)[-4:] == struct.pack("<f", 0.5)
    assert out["global_ptx"] == out["global_cubin"] == [8, 0]


# ---------------------------------------------------------------- CLI

SMALL = """
import ctypes, sys
lib = ctypes.CDLL("libcuda.so.1")
assert lib.cuInit(0) == 0
ctx = ctypes.c_void_p()
assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert lib.cuCtxSetCurrent(ctx) == 0
p = ctypes.c_uint64()
assert lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(100)) == 0
data = ctypes.create_string_buffer(b"abc")
assert lib.cuMemcpyHtoD_v2(p, data, ctypes.c_size_t(3)) == 0
assert lib.cuMemsetD32_v2(ctypes.c_uint64(p.value + 4), 7, ctypes.c_size_t(2)) == 0
from cuda.bindings import driver
try:
    driver.cuGraphCreate(0)
except Exception as exc:  # entry points the stand-in lacks are "not found"
    print("missing:", exc)
print("to stderr via the runner")
sys.exit(int(sys.argv[1]))
"""


def test_cli_prints_json_lines_and_exit_status(built, tmp_path):
    script = tmp_path / "small.py"
    script.write_text(SMALL)
    cmd = [sys.executable, "-m", "tests.fakecuda", "run", str(script), "--cc", "9.0", "--", "0"]
    root = Path(fakecuda.__file__).resolve().parents[2]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root)
    assert proc.returncode == 0, proc.stderr
    calls = [json.loads(ln) for ln in proc.stdout.splitlines()]
    assert [c["call"] for c in calls] == ["cuMemAlloc", "cuMemcpyHtoD", "cuMemsetD32"]
    assert calls[0]["args"] == {"device": 0, "size": 100, "address": 0x200000000000}
    assert calls[1]["args"]["bytes"] == b"abc".hex() and calls[1]["args"]["dst"] == 0x200000000000
    assert calls[2]["args"]["dst"] == 0x200000000004 and calls[2]["args"]["count"] == 2
    assert "to stderr via the runner" in proc.stderr
    assert "cuGraphCreate is not found" in proc.stderr

    failing = subprocess.run(cmd[:-1] + ["3"], capture_output=True, text=True, cwd=root)
    assert failing.returncode == 3
    assert [json.loads(ln)["call"] for ln in failing.stdout.splitlines()][0] == "cuMemAlloc"


def test_no_trace_records_nothing(built, tmp_path):
    script = tmp_path / "small.py"
    script.write_text(SMALL)
    res = fakecuda.run(script, args=["0"], trace=False)
    assert res.returncode == 0 and res.calls == []
