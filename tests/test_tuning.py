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
    assert {s: c.misses for s, c in gpucache_ext.default_cache().stats().items()} == \
        {s: c.misses for s, c in before.items()}  # the variants were in the cache
    # the choice is the best occupancy (no spills first, then fewer registers), at the better block
    shares = {}
    for variant in kernel.variants:
        (res,) = variant.results.values()
        used = res.resources
        for block in ((16, 16), (8, 8)):
            shares[(res.applied_summary(), block)] = (
                not used["spill_stores"], occupancy((8, 6), block[0] * block[1], used["registers"],
                                                    used["shared_bytes"]).occupancy, -used["registers"])
    chosen = next(v for v in kernel.variants if v.config == result.config).results
    assert shares[(next(iter(chosen.values())).applied_summary(), result.block)] == max(shares.values())
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


FLOOR_KERNEL = """from numba import cuda
@cuda.jit
def act(r, x):
    i = cuda.grid(1)
    if 0 < i < r.size - 5:
        r[i] = x[i] * 2.0 + x[i - 1] * x[i + 1] + x[i + 2] * x[i + 3] * x[i + 4] + x[i + 5]
"""


def test_a_register_cap_below_the_floor_says_what_ptxas_applied_and_ranks_by_it(ip, capsys):
    """ptxas raises --max-registers 16 to its sm_86 floor of 24 (a warning in
    the link log alone): the report, the variants table, explain() and
    `kernel.resources` say so, and the cap asked for as applied (24) ranks
    ahead of the raised one that gave the same registers."""
    from gpucache_ext.queries import ResourceRow, variant_occupancy

    capsys.readouterr()
    cell(ip, "--sm 86 --max-registers 16,24 --block 128 --sig 'void(float32[:], float32[:])'", FLOOR_KERNEL)
    out = capsys.readouterr().out
    kernel = ip.user_ns["act"]
    raised, asked = (next(iter(v.results.values())) for v in kernel.variants)
    assert "adjusting per thread register count of 16 to lower bound of 24" in raised.link_log
    assert raised.resources["registers"] == asked.resources["registers"]  # the same code, the same figures
    assert raised.resources["max_registers"] == asked.resources["max_registers"] == 24
    said = "max_registers=16 (raised to 24 by ptxas)"
    assert said in raised.explain().splitlines()[0] and "raised" not in asked.explain()
    report, table = out.split("variants; occupancy at", 1)
    assert said in report  # the report's row
    best = [line for line in table.splitlines() if line.lstrip().startswith("*")]
    assert len(best) == 1 and "max_registers=24" in best[0] and "raised" not in best[0], table
    assert any(said in line for line in table.splitlines())
    rows = [ResourceRow.from_result(r) for r in (raised, asked)]
    assert [row.cap_raised for row in rows] == [True, False]
    assert variant_occupancy(rows, (128,)).best == {asked.stages["cubin"].token}
    result = kernel.tune(np.zeros(64, np.float32), np.ones(64, np.float32), blocks=(128,))
    assert result.config.max_registers == 24
    assert {summary for summary, _, _ in result.table} == {"sm_86 " + said, "sm_86 max_registers=24"}
