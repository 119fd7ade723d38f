"""Reuse precision of the tokens on the differential grid of tests/test_soundness.py.

For every pair of configs that differ in one field (a variant against the
base config at the same sm, or the same variant at two sms), and for every
stage, the pair's artifacts are either byte-equal or not, and their tokens
either equal or not:

* soundness: equal tokens with different bytes (must be 0);
* precision: of the byte-equal pairs, the share that is also shared by token
  (reused instead of rebuilt);
* reusable precision: the same, of the byte-equal pairs whose fields that the
  stage itself reads are equal (only what came before it differs).  A pair
  that differs in such a field (opt 1 against 3, at ptx) can only be found
  equal by building it; the reusable ones are what early cutoff shares.

    .venv/bin/python bench/reuse_precision.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpucache_ext import KernelCache  # noqa: E402
from tests.test_soundness import KERNELS, SMS, VARIANTS, make_config, reuse_counts  # noqa: E402


def measure():
    cache = KernelCache(max_entries=100_000)
    results = {}
    for kernel, (func, sig) in KERNELS.items():
        for variant in VARIANTS:
            for sm in SMS:
                results[kernel, variant, sm] = cache.compile(func, sig, make_config(variant, sm))
    return reuse_counts(results)


def share(part, whole) -> str:
    return f"{part / whole if whole else 1.0:6.1%}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    counts = measure()
    for stage, row in counts.items():
        print(f"{stage:<6} byte-equal pairs {row['byte_equal']:>4}  shared by token {row['shared']:>4}  "
              f"precision {share(row['shared'], row['byte_equal'])}  |  reusable {row['reusable']:>4}  "
              f"shared {row['reused']:>4}  precision {share(row['reused'], row['reusable'])}  "
              f"|  unsound {row['unsound']}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"stages": {s: row for s, row in counts.items() if s != "all"}, "all": counts["all"]},
                      handle, indent=2)
    return 1 if counts["all"]["unsound"] else 0


if __name__ == "__main__":
    sys.exit(main())
