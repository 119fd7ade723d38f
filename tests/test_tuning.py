"""`Kernel.tune`: without a GPU, a ranking by theoretical occupancy that
says so; on the recording stand-in driver (tests/fakecuda), every variant
launched and timed with CUDA events at every block size, the choice bound
and filed in the cache, and found again by a new process without timing."""

import json
from pathlib import Path

import numpy as np
import pytest

import gpucache_ext
from gpucache_ext import samples
from gpucache_ext.occupancy import occupancy

from . import fakecuda
from .helpers import cell

SCRIPT = Path(__file__).with_name("tune_script.py")


def test_without_a_gpu_tune_ranks_by_occupancy_and_says_so(ip):
    cell(ip, f"--sm 86 --max-registers none,32,16 --quiet --sig '{samples.MATMUL_SIG}'", samples.MATMUL)
    kernel = ip.user_ns["matmul"]
    a = np.ones((32, 32), np.float32)
    before = gpucache_ext.default_cache().stats()
    result = kernel.tune(a, a, a.copy(), blocks=((16, 16), (8, 8)), grid=lambda b: (32 // b[0], 32 // b[1]))
    assert not result.measured and not result.remembered
    assert result.note.startswith("no GPU: ranked by theoretical occupancy on sm_86") and "not speed" in result.note
    assert kernel.config == result.config  # bound
    assert {s: c["misses"] for s, c in gpucache_ext.default_cache().stats().items()} == \
        {s: c["misses"] for s, c in before.items()}  # the variants were in the cache
    # the choice is the best occupancy (no spills first, then fewer registers), at the better block
    shares = {}
    for variant in kernel.variants:
        (res,) = variant.results.values()
        used = res.resources
        for block in ((16, 16), (8, 8)):
            shares[(variant.config.summary(), block)] = (
                not used["spill_stores"], occupancy((8, 6), block[0] * block[1], used["registers"],
                                                    used["shared_bytes"]).occupancy, -used["registers"])
    assert shares[(result.config.summary(), result.block)] == max(shares.values())
    assert {(s, b): v for s, b, v in result.table} == {k: v[1] for k, v in shares.items()}
    assert result.grid == (2, 2) if result.block == (16, 16) else (4, 4)


def test_tune_needs_a_signature_to_choose_among_several(ip):
    cell(ip, "--sm 86 --max-registers none,32 --quiet --sig 'void(float32[:])' --sig 'void(float64[:])'",
         "from numba import cuda\n@cuda.jit\ndef one(r):\n    r[0] = 1\n")
    with pytest.raises(gpucache_ext.LaunchError, match="has 2 signatures; give the one to tune for"):
        ip.user_ns["one"].tune(np.zeros(4, np.float32))
    result = ip.user_ns["one"].tune(np.zeros(4, np.float32), signature="void(float32[:])", blocks=(64,))
    assert result.block == 64 and result.grid == 1


def test_tune_counts_no_launch_past_numbas_48_kib_of_shared_memory(ip):
    """numba-cuda never raises a kernel's dynamic shared-memory limit: 64 KiB
    dynamic does not launch on 8.6 (99 KiB only with an opt-in numba never makes)."""
    cell(ip, "--sm 86 --quiet --dynamic-shared 64K --sig 'void(float32[:])'",
         "from numba import cuda\n@cuda.jit\ndef big(r):\n    r[0] = 1\n")
    with pytest.raises(ValueError, match="none of the block sizes .* can launch a variant .*past the 48 KiB"):
        ip.user_ns["big"].tune(np.zeros(4, np.float32), blocks=(64, 128))


@pytest.mark.slow
@pytest.mark.skipif(bool(fakecuda.skip_reason()), reason=fakecuda.skip_reason() or "")
def test_on_the_stand_in_driver_tune_times_every_pair_and_a_new_process_reuses_the_choice(tmp_path):
    env = {"GPUCACHE_DIR": str(tmp_path / "cache"), "GPUCACHE_REDIS_URL": "off"}
    first = fakecuda.run(SCRIPT, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    chosen = json.loads(first.stdout.strip().splitlines()[-1])
    assert chosen["measured"] and not chosen["remembered"] and chosen["rows"] == 6
    assert chosen["bound"] == chosen["config"] and chosen["block"] in (128, 256)
    assert chosen["grid"] == 1024 // chosen["block"]
    # every variant at every block: a warm-up launch, then 3 timed ones, each between two events
    launches = [c for c in first.calls if c["call"].startswith("cuLaunchKernel")]
    events = [c for c in first.calls if c["call"] == "cuEventCreate"]
    assert len(launches) == 3 * 2 * (1 + 3) and len(events) == 3 * 2 * 3 * 2
    assert {tuple(c["args"]["block"]) for c in launches} == {(128, 1, 1), (256, 1, 1)}
    assert {tuple(c["args"]["grid"]) for c in launches} == {(8, 1, 1), (4, 1, 1)}
    again = fakecuda.run(SCRIPT, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    reused = json.loads(again.stdout.strip().splitlines()[-1])
    assert reused["remembered"] and reused["config"] == chosen["config"] and reused["block"] == chosen["block"]
    assert not [c for c in again.calls if c["call"].startswith("cuLaunchKernel")]  # nothing timed again
    forced = json.loads(fakecuda.run(SCRIPT, args=["--force"], env=env).stdout.strip().splitlines()[-1])
    assert forced["measured"] and not forced["remembered"]
