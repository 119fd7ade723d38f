"""The gpucache command, run as a real subprocess on a real cache directory."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpucache_ext import CompileConfig, KernelCache

from . import kernels

ROOT = Path(__file__).resolve().parent.parent


def gpucache(*args, expect=0):
    done = subprocess.run([sys.executable, "-m", "gpucache_ext", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == expect, done.stdout + done.stderr
    return done


@pytest.fixture
def filled(tmp_path):
    cache = KernelCache(directory=tmp_path)
    results = [cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=sm)) for sm in (80, 86)]
    results.append(cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86, opt=1)))
    return tmp_path, results


def test_stats_and_ls(filled):
    directory, results = filled
    stats = json.loads(gpucache("--dir", directory, "--json", "stats").stdout)
    assert stats["layers"]["cubin"]["entries"] == 3 and stats["layers"]["llvm"]["entries"] == 2
    assert stats["bytes"] == sum(p.stat().st_size for p in directory.glob("v1/*/*/*.entry"))
    text = gpucache("--dir", directory, "stats").stdout
    assert "cubin" in text and "total" in text and str(directory) in text

    rows = json.loads(gpucache("--dir", directory, "--json", "ls", "--kernel", "axpy", "--layer", "cubin").stdout)
    assert sorted(r["config"] for r in rows) == ["sm_80", "sm_86"]
    assert {r["token"] for r in rows} == {r.layers["cubin"].token for r in results[:2]}
    assert json.loads(gpucache("--dir", directory, "--json", "ls", "--older-than", "1d").stdout) == []
    assert len(json.loads(gpucache("--dir", directory, "--json", "ls", "--newer-than", "1h").stdout)) == 8
    assert "copy" in gpucache("--dir", directory, "ls").stdout


def test_show_prints_the_header_and_writes_the_artifact(filled, tmp_path):
    directory, results = filled
    token = results[1].layers["cubin"].token
    out = tmp_path / "kernel.cubin"
    text = gpucache("--dir", directory, "show", token[:10], "--out", out).stdout
    assert token in text and "sm_86" in text and "valid     yes" in text and "used" in text
    assert out.read_bytes() == results[1].cubin
    ptx = gpucache("--dir", directory, "show", results[1].layers["ptx"].token).stdout
    assert ".target sm_86" in ptx
    assert "not a token" in gpucache("--dir", directory, "show", "xyz", expect=2).stderr
    assert "no entry" in gpucache("--dir", directory, "show", "abcdef0123", expect=2).stderr


def test_verify_finds_and_fixes_damage(filled):
    directory, results = filled
    damaged = next(directory.glob(f"v1/cubin/*/{results[0].layers['cubin'].token}.entry"))
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 1
    damaged.write_bytes(bytes(data))
    report = json.loads(gpucache("--dir", directory, "--json", "verify", expect=1).stdout)
    assert report["checked"] == 8 and len(report["bad"]) == 1 and "checksum" in report["bad"][0]["problem"]
    assert "removed" in gpucache("--dir", directory, "verify", "--fix").stdout
    assert not damaged.exists()
    assert "0 bad" in gpucache("--dir", directory, "verify").stdout


def test_prune_and_clear(filled):
    directory, _ = filled
    before = json.loads(gpucache("--dir", directory, "--json", "stats").stdout)["bytes"]
    pruned = json.loads(gpucache("--dir", directory, "--json", "prune", "--max-bytes", before // 2).stdout)
    assert pruned["removed"] > 0 and pruned["bytes"] <= before // 2
    assert "removed" in gpucache("--dir", directory, "clear", "--layer", "llvm").stdout
    stats = json.loads(gpucache("--dir", directory, "--json", "stats").stdout)
    assert stats["layers"]["llvm"]["entries"] == 0
    gpucache("--dir", directory, "clear")
    assert json.loads(gpucache("--dir", directory, "--json", "stats").stdout)["bytes"] == 0


def test_bad_arguments_are_clear(tmp_path):
    assert "500M" in gpucache("--dir", tmp_path, "prune", "--max-bytes", "lots", expect=2).stderr
    assert "invalid choice" in gpucache("--dir", tmp_path, "ls", "--layer", "sass", expect=2).stderr
    assert "7d" in gpucache("--dir", tmp_path, "ls", "--older-than", "soon", expect=2).stderr
    assert "no entries" in gpucache("--dir", tmp_path, "ls").stdout
