"""CUDA 12 beside CUDA 13: gpucache_ext installs either major's toolchain
(the ``cu12`` or ``cu13`` extra).  A cache written under one is a miss under
the other (every stage from lowering on keys the major and the tools' own
releases, read here from the installed wheels); the targets CUDA 13 dropped
(sm_50 to sm_72) are refused under it by name, with the fix; and with neither
extra the first use says which to install.  CI runs this file (the whole
quick suite) under both majors."""

import subprocess
import sys
from importlib import metadata

import pytest
from IPython.core.error import UsageError

import gpucache_ext
from gpucache_ext import CompileConfig, ConfigError, toolchain
from gpucache_ext.keys.config import supported_ccs
from gpucache_ext.keys.tokens import component

from . import kernels
from .helpers import ROOT, cell, gpucache, run_python

MAJOR = toolchain.cuda_major()

AXPY = """
from numba import cuda

@cuda.jit("void(float32[:], float32, float32[:], float32[:])")
def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * x[i] + y[i]
"""


def _installed(*dists):
    """The version of the first of `dists` installed (the wheel names differ by major)."""
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    pytest.fail(f"none of {dists} is installed: install gpucache_ext with its cu12 or cu13 extra")


def test_the_major_is_the_installed_cuda_bindings_one():
    assert MAJOR == int(metadata.version("cuda-bindings").split(".")[0]) and MAJOR in (12, 13)


@pytest.mark.parametrize("stage", ["llvm", "ptx", "cubin", "fatbin"])
def test_every_stage_from_lowering_keys_the_cuda_major_and_cuda_bindings(stage):
    versions = toolchain.stage_toolchain(stage)
    assert versions["cuda"] == str(MAJOR)
    assert versions["cuda-bindings"] == metadata.version("cuda-bindings")
    part = toolchain.toolchain_component(stage)  # what the stage's token hashes of its tools
    assert part.digest == component(versions).digest and f"cuda {MAJOR}" in part.shown
    other = {**versions, "cuda": {12: "13", 13: "12"}[MAJOR]}  # the same versions under the other major
    assert component(other).digest != part.digest


def test_each_library_part_is_the_release_of_the_installed_wheel():
    """libNVVM reports nvvmVersion 2.0 and IR version 2.0 in CUDA 12.9 and 13.x
    alike: its part also holds the release its PTX header names, so that the
    ptx token differs between the majors (and between releases of one)."""
    nvvm = _installed("nvidia-nvvm", "nvidia-cuda-nvcc-cu12")  # (13: its own wheel; 12: nvcc's)
    libnvvm = toolchain.stage_toolchain("ptx")["libnvvm"]
    assert f"release {'.'.join(nvvm.split('.')[:2])}, V{nvvm}" in libnvvm and "Build ID" in libnvvm
    cubin = toolchain.stage_toolchain("cubin")
    for part, dists in [("nvjitlink", ("nvidia-nvjitlink", "nvidia-nvjitlink-cu12")),
                        ("nvrtc", ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12"))]:
        assert cubin[part] == ".".join(_installed(*dists).split(".")[:2]), part
        assert cubin[part].split(".")[0] == str(MAJOR)
    fatbin = toolchain.stage_toolchain("fatbin")["nvfatbin"]
    assert fatbin == ".".join(_installed("nvidia-nvfatbin", "nvidia-nvfatbin-cu12").split(".")[:2])


# -- the targets each major builds ---------------------------------------------


@pytest.mark.skipif(MAJOR >= 13, reason="CUDA 12 only: under CUDA 13 sm_70 is refused (the test below)")
def test_cuda12_builds_the_targets_cuda13_dropped():
    assert {(5, 0), (6, 1), (7, 0), (7, 2)} <= set(supported_ccs())
    assert CompileConfig(sm=70).sm == 70


@pytest.mark.skipif(MAJOR < 13, reason="CUDA 13 only: CUDA 12 builds sm_50 to sm_72")
@pytest.mark.parametrize("sm", [50, 61, "sm_70", "7.2"])
def test_cuda13_refuses_the_targets_it_dropped_naming_the_fix(sm):
    assert min(supported_ccs()) == (7, 5)
    with pytest.raises(ConfigError, match=r"CUDA 13, the installed toolchain, builds no target before sm_75; "
                                          r'use sm_75 or later, or .*pip install "gpucache_ext\[cu12\]"'):
        CompileConfig(sm=sm)


@pytest.mark.skipif(MAJOR < 13, reason="CUDA 13 only: CUDA 12 builds sm_70")
def test_cuda13_refuses_them_in_the_magic_jit_and_warm(ip, tmp_path, monkeypatch):
    fix = 'use sm_75 or later, or install the CUDA 12 toolchain for it: pip install "gpucache_ext[cu12]"'
    with pytest.raises(UsageError) as raised:
        cell(ip, "--sm 70 --quiet", AXPY)
    assert str(raised.value).startswith("--sm 70: CUDA 13") and fix in str(raised.value)
    with pytest.raises(UsageError, match="sm 70: CUDA 13"):
        cell(ip, "--sm 70,86 --quiet", AXPY)

    monkeypatch.setenv("GPUCACHE_SM", "70")  # gpucache_ext.jit's target, where there is no GPU
    with pytest.raises(ConfigError) as raised:
        gpucache_ext.jit(kernels.AXPY_SIG)(kernels.axpy)
    assert fix in str(raised.value)
    monkeypatch.delenv("GPUCACHE_SM")

    done = gpucache("warm", "tests.kernels", "--sm", "70,86", "--dir", tmp_path, expect=2)
    assert "builds no target before sm_75" in done.stderr and "gpucache_ext[cu12]" in done.stderr


# -- neither extra installed ---------------------------------------------------

# The same search as for a missing nvJitLink, for a library that is installed with neither extra:
# cuFFT (a real library of cuda.pathfinder's, which no requirement of ours brings).
WITHOUT_TOOLCHAIN = """
import json, sys
from gpucache_ext import toolchain
toolchain._REQUIRED_LIBRARIES["cufft"] = "cuFFT"
said = {}
try:
    import gpucache_ext.backends.numba_cuda.stages
except ImportError as error:
    said["import"] = [type(error).__name__, str(error)]
from gpucache_ext import CompileConfig, KernelCache
from tests import kernels
try:
    KernelCache(directory=None).compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=86))
except Exception as error:
    said["compile"] = [type(error).__name__, str(error)]
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
try:
    shell.run_line_magic("load_ext", "gpucache_ext")
except Exception as error:
    said["load_ext"] = [type(error).__name__, str(error)]
said["magic registered"] = "gpukernel" in shell.magics_manager.magics["cell"]
print(json.dumps(said))
"""


def test_without_a_toolchain_the_first_use_names_the_extras():
    if toolchain._findable("cufft"):
        pytest.skip("cuFFT is installed here: it cannot stand for a missing library")
    said = run_python(WITHOUT_TOOLCHAIN, json_line=True)  # (a new process: nothing found yet)
    assert said["import"][0] == said["compile"][0] == "ToolchainMissing"
    assert said["load_ext"][0] == "UsageError" and not said["magic registered"]
    for _, message in (said["import"], said["compile"], said["load_ext"]):
        assert message.startswith("no CUDA toolchain: cuFFT is not installed")
        assert 'pip install "gpucache_ext[cu12]"' in message and 'pip install "gpucache_ext[cu13]"' in message
        assert "r580" in message and "sm_75" in message


def test_the_base_requirements_pin_no_cuda_major_and_the_extras_each_pin_one():
    requires = metadata.requires("gpucache_ext") or []
    base = [r for r in requires if "extra ==" not in r]
    assert not [r for r in base if "cu12" in r or "cu13" in r or r.startswith("cuda-bindings")], base
    extra = {major: [r.split(";")[0] for r in requires if f'extra == "{major}"' in r] for major in ("cu12", "cu13")}
    assert any(r.startswith("numba-cuda[cu12]") for r in extra["cu12"])
    assert any(r.startswith("numba-cuda[cu13]") for r in extra["cu13"])
    assert "cuda-bindings<13,>=12.9" in extra["cu12"] and "cuda-bindings<14,>=13" in extra["cu13"]
    assert any(r.startswith("nvidia-nvfatbin-cu12") for r in extra["cu12"])
    assert any(r.startswith("nvidia-nvfatbin<14") for r in extra["cu13"])
    test = [r.split(";")[0] for r in requires if 'extra == "test"' in r]
    assert not [r for r in test if "cu12" in r or "cu13" in r], test


def test_the_import_of_the_package_loads_no_toolchain_check():
    """`import gpucache_ext` (and the gpucache command) still work without a toolchain:
    only the compile core and the magic need one."""
    done = subprocess.run([sys.executable, "-c", "import gpucache_ext, sys; "
                           "sys.exit('gpucache_ext.toolchain.required' in sys.modules)"], cwd=ROOT)
    assert done.returncode == 0
