"""Shared test setup: `gpu`-marked tests skip cleanly on machines without a GPU."""

import pytest


def _have_gpu() -> bool:
    try:
        from cuda.bindings import driver

        err, = driver.cuInit(0)[:1]
        if err != driver.CUresult.CUDA_SUCCESS:
            return False
        err, count = driver.cuDeviceGetCount()
        return err == driver.CUresult.CUDA_SUCCESS and count > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _have_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and driver")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
