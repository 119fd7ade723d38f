"""Reuse precision of the tokens on the differential grid of tests/test_soundness.py.

For every pair of configs that differ in one field (a variant against the
base config at the same sm, or the same variant at two sms), and for every
stage, the pair's artifacts are either byte-equal or not, and their tokens
either equal or not:

* soundness: equal tokens with different bytes (must be 0);
* precision: of the byte-equal pairs, the share that is also shared by token
  (reused instead of rebuilt).

    .venv/bin/python bench/reuse_precision.py [--json FILE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpucache_ext import KernelCache  # noqa: E402
from tests.test_soundness import (ARTIFACT_STAGES, KERNELS, SMS, VARIANTS, artifact,  # noqa: E402
                                  make_config)


def single_field_pairs():
    """(variant, sm) pairs that differ in one field."""
    for variant in VARIANTS:
        if variant == "base":
            continue
        for sm in SMS:
            yield ("base", sm), (variant, sm)
    for variant in VARIANTS:
        for sm_a, sm_b in itertools.combinations(SMS, 2):
            yield (variant, sm_a), (variant, sm_b)


def measure():
    cache = KernelCache(max_entries=100_000)
    results = {}
    for kernel, (func, sig) in KERNELS.items():
        for variant in VARIANTS:
            for sm in SMS:
                results[kernel, variant, sm] = cache.compile(func, sig, make_config(variant, sm))
    per_stage = {stage: {"byte_equal": 0, "shared": 0, "unsound": 0} for stage in ARTIFACT_STAGES}
    for kernel in KERNELS:
        for a, b in single_field_pairs():
            first, second = results[(kernel, *a)], results[(kernel, *b)]
            for stage in ARTIFACT_STAGES:
                same_bytes = artifact(first, stage) == artifact(second, stage)
                same_token = first.stages[stage].token == second.stages[stage].token
                counts = per_stage[stage]
                counts["byte_equal"] += same_bytes
                counts["shared"] += same_bytes and same_token
                counts["unsound"] += same_token and not same_bytes
    total = {key: sum(c[key] for c in per_stage.values()) for key in ("byte_equal", "shared", "unsound")}
    return per_stage, total


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    per_stage, total = measure()
    for stage, counts in [*per_stage.items(), ("all", total)]:
        share = counts["shared"] / counts["byte_equal"] if counts["byte_equal"] else 1.0
        print(f"{stage:<6} byte-equal pairs {counts['byte_equal']:>4}  shared by token "
              f"{counts['shared']:>4}  precision {share:6.1%}  unsound {counts['unsound']}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"stages": per_stage, "all": total}, handle, indent=2)
    return 1 if total["unsound"] else 0


if __name__ == "__main__":
    sys.exit(main())
