"""numba-cuda's own test kernels, compiled through the staged cache and
compared with numba-cuda's output (the harvest and comparison are in
`tests/corpus.py`; ``python -m tests.corpus`` prints the full table).

The quick run (``-m "not slow"``) takes the kernels of two small modules,
each for sm_86 and one more target; the `slow` run takes every module, each
kernel for sm_86 and for one more target and flag set.
"""

from __future__ import annotations

import pytest

from . import corpus

# The quick run's kernels: a numba-cuda test module and a documentation example.
QUICK = ("numba.cuda.tests.cudapy.test_montecarlo", "numba.cuda.tests.doc_examples.test_vecadd")


def _check(records):
    print(corpus.table(records))
    broken = [r for r in records if not r.get("kernel")]
    assert not broken, broken
    counted = [r for r in records if r["outcome"] != "numba-fails"]
    assert counted, "nothing was harvested"
    wrong = [r for r in counted if r["outcome"] in ("different", "failed")]
    assert not wrong, "\n".join(f"{r['module']} {r['kernel']} [{r['variant']}]: {r['outcome']} {r['reason']}"
                                for r in wrong)
    return counted


def test_a_few_kernels_compile_to_what_numba_compiles():
    assert set(QUICK) <= set(corpus.modules()), "a sampled module is missing from numba-cuda"
    counted = _check(corpus.collect(QUICK, "all"))
    assert {r["module"] for r in counted} == {name.rsplit(".", 1)[-1] for name in QUICK}
    assert {r["variant"] for r in counted} == {"sm86", "sm75"}
    assert all(r["outcome"] == "equivalent" for r in counted)


@pytest.mark.slow
def test_every_kernel_compiles_to_what_numba_compiles():
    counted = _check(corpus.collect(corpus.modules(), "all"))
    equivalent = sum(r["outcome"] == "equivalent" for r in counted)
    assert equivalent >= 0.95 * len(counted)
