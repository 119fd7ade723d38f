"""Plain numba-cuda program exercising the dispatcher's launch paths.

Run under the fake driver (``python -m tests.fakecuda run`` this file); the
last stdout line is ``RESULT {json}`` with facts the tests compare with the
recorded driver calls.  Kernels do not execute, so device contents only change
through copies and memsets.
"""

import json
import sys

import numpy as np
from numba import cuda, float32

out = {}


@cuda.jit
def add(a, x):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += x


# numpy array argument: automatic transfer in and out
a = np.arange(16, dtype=np.float32)
add[1, 16](a, np.float32(1.0))

# device array round trip
h = np.arange(32, dtype=np.int32)
d = cuda.to_device(h)
out["d_ptr"] = int(d.device_ctypes_pointer.value)
add[1, 32](d, 3)
out["roundtrip"] = bool((d.copy_to_host() == h).all())

# scalar arguments of every kind
res = cuda.device_array(4, dtype=np.float64)
out["res_ptr"] = int(res.device_ctypes_pointer.value)


@cuda.jit
def scalars(o, i32, i64, f32, f64, c128, b):
    o[0] = i32 + i64 + f32 + f64 + c128.real + c128.imag + b


scalars[1, 1](res, np.int32(-7), np.int64(1 << 40), np.float32(1.5), np.float64(2.25), np.complex128(3 + 4j), True)

# a record (numpy structured scalar)
rec_dt = np.dtype([("x", np.int32), ("y", np.float64)], align=True)
recs = np.zeros(1, dtype=rec_dt)
recs[0]["x"] = 5
recs[0]["y"] = 6.5


@cuda.jit
def reck(o, r):
    o[0] = r.x + r.y


reck[1, 1](res, recs[0])

# explicit stream
s = cuda.stream()
add[2, 32, s](d, 1)
s.synchronize()


# dynamic shared memory
@cuda.jit
def dyn(o):
    sm = cuda.shared.array(0, dtype=float32)
    sm[cuda.threadIdx.x] = 1
    cuda.syncthreads()
    o[0] = sm[0]


dyn[1, 64, 0, 256](res)


# cooperative kernel (grid sync)
@cuda.jit
def coop(o):
    g = cuda.cg.this_grid()
    o[cuda.grid(1) % 4] = 1
    g.sync()


coop[2, 32](res)
out["max_coop_blocks"] = coop.overloads[coop.signatures[0]].max_cooperative_grid_blocks(32)

# forall (occupancy-based configuration)
add.forall(1000)(d, 2)

# specialize / configure
sadd = add.specialize(d, 5)
sadd[3, 64](d, 5)
add.configure(4, 128)(d, 6)


# debug kernel (exception check reads a zeroed global)
@cuda.jit(debug=True, opt=False)
def dbg(o):
    if o[0] > 1e30:
        raise ValueError("too big")
    o[1] = 1


dbg[1, 1](res)


# shared memory carveout
@cuda.jit(shared_memory_carveout="MaxShared")
def carve(o):
    o[2] = 2


carve[1, 1](res)


# signature-declared kernel
@cuda.jit("void(float64[::1], int64)")
def sig(o, n):
    o[3] = n


sig[1, 1](res, 42)

cuda.synchronize()
print("RESULT " + json.dumps(out, sort_keys=True))
sys.stdout.flush()
