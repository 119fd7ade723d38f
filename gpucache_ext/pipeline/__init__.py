"""The one pipeline every compile goes through, and what it gives back.

`driver` (the stage table, `Pipeline`: lookup, single flight, toolchain
check, build, digest, filing; `CompilePlan`: one target's tokens and
stages), `cache` (`KernelCache`, a small facade over the driver, the store,
the index, provenance and the audits), `results` (what a compile returns)
and `artifacts` (what each stage's artifact holds), `audit` (hits compiled
again and compared), `provenance` (what `recompile` needs), `history` (per
cell), `definitions` (where a kernel was defined), `debuginfo` (the source
files debug info names).  Importing the package imports none of them.
"""
