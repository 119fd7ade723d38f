"""gpucache warm: build a notebook's or a module's kernels into the disk or
shared cache ahead of a job, so that every process of the job only reads.

    gpucache warm analysis.ipynb --sm 80,86,90            # its %%gpukernel cells, in a fresh kernel
    gpucache warm mypkg.kernels --sm 80,90 --fastmath on   # a module's gpucache_ext.jit kernels
    gpucache warm tools/kernels.py --sm 86 --max-registers 32,64

A notebook runs whole, in a fresh Jupyter kernel, as it would run (nbclient;
``pip install 'gpucache_ext[notebook]'``), its ``%%gpukernel`` lines given
``--sm`` and the magic's other flags given (they win over the cell's own: ``--sm
80,86,90`` builds each cell's kernels for the three targets, as one fatbin).
A module (a dotted name, or a ``.py`` file) is imported, and each of its
``gpucache_ext.jit`` kernels with declared signatures is compiled for each
target and config the flags give (``--sm`` a list, ``--opt``,
``--fastmath`` and ``--max-registers`` lists as a sweep's; the other flags
as the magic's).  Both print what they built and what was already there,
and name what they could not warm, and why: a lazy kernel (no signature: it
compiles at its first launch, for its arguments' types), a cell that failed
(it needs input at run time, a file, a GPU).  The tiers are the ones every
compile here reads: ``--dir`` (else ``GPUCACHE_DIR``), ``--redis-url``
(else ``GPUCACHE_REDIS_URL``), with ``GPUCACHE_SECRET``.  Exits 1 when
something could not be warmed, 0 otherwise.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, List

from ..keys.config import Targets, add_config_arguments, check_cell_flags, config_from_flags, flags_text
from ..keys.stagespec import STAGE_SPEC
from .output import CommandError

_FLAG_RE = re.compile(r"^(\s*%%gpukernel\b)(.*)$")


def add_warm(add) -> None:
    """The warm command's arguments (`gpucache_ext.cli.parser`)."""
    warm = add("warm", help="build a notebook's or a module's kernels into the cache ahead of a job",
               description=__doc__.split("\n\n", 1)[1].split("\n\n", 1)[1])
    warm.add_argument("target", metavar="NOTEBOOK_OR_MODULE",
                      help="a notebook (.ipynb), a module's dotted name, or a .py file")
    warm.add_argument("--sm", required=True, metavar="SM[,SM...]", help="the targets, e.g. 80,86,90")
    add_config_arguments(warm.add_argument)  # the magic's flags, as the config declares them
    warm.add_argument("--timeout", type=float, default=600, help="seconds a notebook cell may run (default 600)")


def cmd_warm(disk, args, out) -> int:
    env = _tier_environment(args)
    target = args.target
    configs = _configs(args)  # (a bad flag is refused before a notebook runs)
    if target.endswith(".ipynb"):
        found = warm_notebook(Path(target), args.sm, flags_text(args), env, args.timeout)
    else:
        found = warm_module(target, configs, env)
    if args.json:
        out(found)
    else:
        out(_text(found))
    return 1 if found["not_warmed"] else 0


def _tier_environment(args) -> Dict[str, str]:
    """The environment a compile of the warm reads its tiers from: --dir and
    --redis-url where given (as GPUCACHE_DIR and GPUCACHE_REDIS_URL)."""
    env = {}
    if args.dir is not None:
        env["GPUCACHE_DIR"] = str(Path(args.dir).expanduser().resolve())
    if args.redis_url is not None:
        env["GPUCACHE_REDIS_URL"] = args.redis_url
    return env


# -- a module ------------------------------------------------------------------

def warm_module(target: str, configs: List[Any], env: Dict[str, str]) -> Dict[str, Any]:
    """Import `target` with the tiers of `env`, and compile each of its
    ``gpucache_ext.jit`` kernels with declared signatures for every config
    of `configs` (`_configs`)."""
    os.environ.update(env)
    module = _import(target)
    from ..importing import loaded_class
    from ..pipeline.results import short_signature

    built, cached, not_warmed = [], [], []
    kinds = (loaded_class("gpucache_ext.backends.numba_cuda.launch.kernel", "Kernel")
             + loaded_class("gpucache_ext.backends.numba_cuda_mlir.launch", "MlirKernel"))
    kernels = {name: value for name, value in vars(module).items() if isinstance(value, kinds)}
    if not kernels:
        not_warmed.append({"what": target, "why": "it defines no gpucache_ext.jit kernel (a kernel of "
                           "numba.cuda.jit is numba's own, not cached: decorate it with gpucache_ext.jit)"})
    for name, kernel in sorted(kernels.items()):
        func, declared, config_for, link = _warmed(kernel)
        if not declared:
            not_warmed.append({"what": name, "why": "a lazy kernel (no signature): it compiles at its first "
                               "launch, for its arguments' types; give it one to warm it, e.g. "
                               "@gpucache_ext.jit(\"void(float32[:])\")"})
            continue
        for config, argtypes in itertools.product(configs, declared):
            config = config_for(config)
            result = kernel.cache.compile(func, argtypes, config, link=link)
            row = {"kernel": name, "signature": short_signature(argtypes), "config": config.summary()}
            (built if any(not done.hit for stage, done in result.stages.items() if STAGE_SPEC[stage].persisted)
             else cached).append(row)
    return {"target": target, "built": built, "cached": cached, "not_warmed": not_warmed}


def _warmed(kernel):
    """What a module's kernel is warmed as: (the function compiled, its
    declared argument types, the config of a warm config for it (its
    decorator's options win), what it links).  A numba-cuda-mlir kernel's
    declared signatures are those it compiled when decorated."""
    if type(kernel).__name__ == "MlirKernel":
        from ..backends.numba_cuda_mlir.launch import config_over

        return (kernel.source, tuple(kernel.results),
                lambda config: config_over(config, kernel.source.targetoptions), ())
    from ..backends.numba_cuda.options import config_with_options

    return (kernel.py_func, kernel.declared, lambda config: config_with_options(config, kernel.options),
            kernel.options.get("link") or ())


def _configs(args) -> List[Any]:
    """The configs the parsed flags give: each target of ``--sm``, times a
    sweep's combinations of the listed values."""
    from ..sweeps import combinations

    try:
        targets = Targets(args.sm).sms
        base, swept = check_cell_flags(*config_from_flags(args, targets[0]))
        variants = combinations(base, swept) if swept else [base]
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    return [variant.replace(sm=sm) for sm in targets for variant in variants]


def _import(target: str):
    """A module by dotted name, or a .py file by path (run as a module of its file's name)."""
    if target.endswith(".py"):
        path = Path(target).resolve()
        if not path.is_file():
            raise CommandError(f"there is no file {target}")
        sys.path.insert(0, str(path.parent))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        return module
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name and target.startswith(exc.name):
            raise CommandError(f"no module named {target!r} (give a dotted name importable from here, a .py "
                               "file or a .ipynb notebook)") from None
        raise


# -- a notebook ----------------------------------------------------------------

_REPORT = """\
import json as _json, gpucache_ext as _g
from gpucache_ext.launch import registry as _registry
_lazy = sorted({k.__name__ for k in _registry.live_kernels() if not k.declared and not k.results})
_stats = {s: [v.hits, v.misses] for s, v in _g.default_cache().stats().items()}
print("GPUCACHE-WARM " + _json.dumps({"lazy": _lazy, "stats": _stats}))
"""


def warm_notebook(path: Path, sms: str, flags: List[str], env: Dict[str, str], timeout: float) -> Dict[str, Any]:
    """Run the notebook at `path` whole in a fresh kernel, its %%gpukernel
    lines given ``--sm SMS`` and `flags`; what its cells built."""
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError:
        raise CommandError("warming a notebook runs it in a fresh Jupyter kernel, which needs nbclient and "
                           "ipykernel: pip install 'gpucache_ext[notebook]'") from None
    if not path.is_file():
        raise CommandError(f"there is no notebook {path}")
    notebook = nbformat.read(path, as_version=4)
    extra = " ".join(["--sm", sms, *flags])
    magic_cells = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        first, _, rest = cell.source.partition("\n")
        match = _FLAG_RE.match(first)
        if match:
            cell.source = f"{match.group(1)}{match.group(2)} {extra}\n{rest}"
            magic_cells.append(index)
    notebook.cells.insert(0, nbformat.v4.new_code_cell("%load_ext gpucache_ext"))
    notebook.cells.append(nbformat.v4.new_code_cell(_REPORT))
    before = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        NotebookClient(notebook, timeout=int(timeout), kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(path.resolve().parent)}}).execute()
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    not_warmed = []
    for index, cell in enumerate(notebook.cells[1:-1]):
        for output in cell.get("outputs", ()):
            if output.get("output_type") == "error":
                first = (cell.source.splitlines() or [""])[0][:60]
                not_warmed.append({"what": f"cell {index + 1} ({first})",
                                   "why": f"{output.get('ename')}: {output.get('evalue')} (a cell that needs "
                                          "input at run time, a file or a GPU cannot be warmed)"})
    report = _notebook_report(notebook.cells[-1])
    not_warmed += [{"what": name, "why": "a lazy kernel (no signature) that no cell launched: it compiles "
                    "at its first launch; give it a signature (@cuda.jit(\"void(...)\")) or --sig in its "
                    "%%gpukernel line"} for name in report.get("lazy", ())]
    stats = report.get("stats", {})
    built = sum(misses for stage, (_, misses) in stats.items() if STAGE_SPEC[stage].persisted)
    cached = sum(hits for stage, (hits, _) in stats.items() if STAGE_SPEC[stage].persisted)
    if not magic_cells:
        not_warmed.append({"what": str(path), "why": "it has no %%gpukernel cell"})
    return {"target": str(path), "cells": len(magic_cells), "built": built, "cached": cached,
            "not_warmed": not_warmed}


def _notebook_report(cell) -> Dict[str, Any]:
    for output in cell.get("outputs", ()):
        for line in str(output.get("text", "")).splitlines():
            if line.startswith("GPUCACHE-WARM "):
                return json.loads(line[len("GPUCACHE-WARM "):])
    return {}


def _text(found: Dict[str, Any]) -> str:
    lines = []
    if isinstance(found["built"], list):
        lines += [f"built   {row['kernel']} {row['signature']} [{row['config']}]" for row in found["built"]]
        lines += [f"cached  {row['kernel']} {row['signature']} [{row['config']}]" for row in found["cached"]]
        lines.append(f"{found['target']}: {len(found['built'])} built, {len(found['cached'])} already cached")
    else:
        lines.append(f"{found['target']}: {found['cells']} %%gpukernel cells run; {found['built']} entries built, "
                     f"{found['cached']} already cached")
    lines += [f"not warmed: {row['what']}: {row['why']}" for row in found["not_warmed"]]
    return "\n".join(lines)
