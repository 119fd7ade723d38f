"""numba-cuda on two devices (run with --cc 9.0,8.0): the same kernel is
launched on device 0 and, under ``with cuda.gpus[1]``, on device 1, which
loads its own module.  Last stdout line: ``RESULT {json}``."""

import json

import numpy as np
from numba import cuda


@cuda.jit
def add(a, x):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += x


out = {"ngpus": len(cuda.gpus), "cc": [list(g.compute_capability) for g in cuda.gpus]}
d0 = cuda.to_device(np.arange(8, dtype=np.float64))
add[1, 8](d0, 1.0)
out["ptr0"] = int(d0.device_ctypes_pointer.value)
with cuda.gpus[1]:
    d1 = cuda.to_device(np.arange(8, dtype=np.float64) * 2)
    add[2, 4](d1, 2.0)
    out["ptr1"] = int(d1.device_ctypes_pointer.value)
    out["back1"] = d1.copy_to_host().tolist()
    out["dev1_name"] = (
        cuda.get_current_device().name.decode()
        if isinstance(cuda.get_current_device().name, bytes)
        else cuda.get_current_device().name
    )
cuda.synchronize()
print("RESULT " + json.dumps(out, sort_keys=True))
