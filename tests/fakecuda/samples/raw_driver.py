"""Drives the fake driver's C entry points directly through ctypes with PTX,
cubin, fatbin and LTO-IR images made here by numba / nvJitLink / nvFatbin.
Run with --cc 9.0,8.0.  Last stdout line: ``RESULT {json}``."""

import ctypes
import json
import re

from cuda.bindings import nvfatbin, nvjitlink
from numba import cuda

lib = ctypes.CDLL("libcuda.so.1")
out = {}


def check(r, what):
    if r != 0:
        raise RuntimeError(f"{what} -> {r}")


def k(a, x):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = x


SIG = "void(float32[::1], float32)"
ptx90, _ = cuda.compile(k, SIG, cc=(9, 0), output="ptx", device=False, abi="numba")
ptx80, _ = cuda.compile(k, SIG, cc=(8, 0), output="ptx", device=False, abi="numba")
ltoir, _ = cuda.compile(k, SIG, cc=(9, 0), output="ltoir", device=False, abi="numba")
ENTRY = r"\.entry\s+(\S+)\s*\("
name = re.search(ENTRY, ptx90).group(1)
name80 = re.search(ENTRY, ptx80).group(1)  # each compile mangles a new name


def link(ptx, arch):
    h = nvjitlink.create(1, [f"-arch={arch}"])
    nvjitlink.add_data(h, nvjitlink.InputType.PTX, ptx.encode(), len(ptx), "k")
    nvjitlink.complete(h)
    buf = bytearray(nvjitlink.get_linked_cubin_size(h))
    nvjitlink.get_linked_cubin(h, buf)
    nvjitlink.destroy(h)
    return bytes(buf)


cubin90 = link(ptx90, "sm_90")
fb = nvfatbin.create([], 0)
nvfatbin.add_cubin(fb, cubin90, len(cubin90), "90", "k")
p80 = ptx80.encode() + b"\0"
nvfatbin.add_ptx(fb, p80, len(p80), "80", "k", "")
fatbin = bytearray(nvfatbin.size(fb))
nvfatbin.get(fb, fatbin)
fatbin = bytes(fatbin)

c_void_pp = ctypes.POINTER(ctypes.c_void_p)
check(lib.cuInit(0), "cuInit")
ctxs = []
for dev in (0, 1):
    c = ctypes.c_void_p()
    check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(c), dev), "retain")
    ctxs.append(c)

dptr = ctypes.c_uint64()
check(lib.cuCtxSetCurrent(ctxs[0]), "set")
check(lib.cuMemAlloc_v2(ctypes.byref(dptr), ctypes.c_size_t(64)), "alloc")
out["dptr"] = dptr.value


_keep = []


def params_of(x):
    # 7 array fields (meminfo, parent, nitems, itemsize, data, shape, stride) + float32
    fields = [ctypes.c_uint64(v) for v in (0, 0, 16, 4, dptr.value, 16, 4)] + [ctypes.c_float(x)]
    _keep.append(fields)
    return (ctypes.c_void_p * len(fields))(*[ctypes.addressof(v) for v in fields])


def launch(mod, grid, kname=name):
    f = ctypes.c_void_p()
    check(lib.cuModuleGetFunction(ctypes.byref(f), mod, kname.encode()), "getfunction")
    regs = ctypes.c_int()
    check(lib.cuFuncGetAttribute(ctypes.byref(regs), 4, f), "attr")
    check(lib.cuLaunchKernel(f, grid, 1, 1, 32, 1, 1, 0, None, params_of(2.5), None), "launch")
    return regs.value


mods = {}
for label, image in (("ptx", ptx90.encode() + b"\0"), ("cubin", cubin90), ("fatbin", fatbin)):
    m = ctypes.c_void_p()
    check(lib.cuModuleLoadData(ctypes.byref(m), ctypes.c_char_p(image)), label)
    mods[label] = m
    out["regs_" + label] = launch(m, {"ptx": 1, "cubin": 2, "fatbin": 3}[label])

# the fatbin on the 8.0 device falls back to its (compressed) sm_80 PTX
check(lib.cuCtxSetCurrent(ctxs[1]), "set1")
m = ctypes.c_void_p()
check(lib.cuModuleLoadData(ctypes.byref(m), ctypes.c_char_p(fatbin)), "fatbin on 8.0")
launch(m, 4, name80)
# the sm_90 cubin cannot load on 8.0; neither can LTO-IR anywhere
out["cubin90_on_80"] = lib.cuModuleLoadData(ctypes.byref(ctypes.c_void_p()), ctypes.c_char_p(cubin90))
check(lib.cuCtxSetCurrent(ctxs[0]), "set0")
out["ltoir"] = lib.cuModuleLoadData(ctypes.byref(ctypes.c_void_p()), ctypes.c_char_p(ltoir))

# occupancy answers are deterministic
f = ctypes.c_void_p()
check(lib.cuModuleGetFunction(ctypes.byref(f), mods["cubin"], name.encode()), "getfunction")
nb = ctypes.c_int()
check(lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(nb), f, 256, ctypes.c_size_t(0)), "occ")
grid, block = ctypes.c_int(), ctypes.c_int()
check(
    lib.cuOccupancyMaxPotentialBlockSize(ctypes.byref(grid), ctypes.byref(block), f, None, ctypes.c_size_t(0), 0),
    "occ2",
)
out["occupancy"] = [nb.value, grid.value, block.value]

# launch with a packed parameter buffer through `extra`
buf = (ctypes.c_uint64 * 7)(0, 0, 16, 4, dptr.value, 16, 4)
raw = bytes(buf) + bytes(ctypes.c_float(1.0)) + b"\0" * 4
cbuf = ctypes.create_string_buffer(raw, len(raw))
size = ctypes.c_size_t(len(raw))
extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(cbuf), 2, ctypes.addressof(size), 0)
check(lib.cuLaunchKernel(f, 5, 1, 1, 32, 1, 1, 0, None, None, extra), "launch extra")
check(lib.cuLaunchCooperativeKernel(f, 6, 1, 1, 64, 1, 1, 128, None, params_of(0.5)), "cooperative")

# module globals resolve to zeroed fake device memory of the declared size
env = re.search(r"\.global\s+\.align\s+8\s+\.u64\s+(\S+);", ptx90).group(1)
for label in ("ptx", "cubin"):
    gp, gs = ctypes.c_uint64(), ctypes.c_size_t()
    check(lib.cuModuleGetGlobal_v2(ctypes.byref(gp), ctypes.byref(gs), mods[label], env.encode()), "global")
    out["global_" + label] = [gs.value, ctypes.c_uint64.from_address(gp.value).value]
print("RESULT " + json.dumps(out, sort_keys=True))
