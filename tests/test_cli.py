"""The gpucache command, run as a real subprocess on a real cache directory
(`slow`); the quick sample at the end runs its commands in this process
(`cli.main`) and the entry point once as a subprocess."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpucache_ext import CompileConfig, KernelCache

from . import kernels
from .helpers import gpucache

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def filled(tmp_path):
    cache = KernelCache(directory=tmp_path)
    results = [cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=sm)) for sm in (80, 86)]
    results.append(cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86, opt=1)))
    return tmp_path, results


@pytest.mark.slow
def test_stats_and_ls(filled):
    directory, results = filled
    stats = json.loads(gpucache("--dir", directory, "--json", "stats").stdout)
    assert stats["stages"]["cubin"]["entries"] == 3 and stats["stages"]["llvm"]["entries"] == 2
    assert stats["bytes"] == sum(p.stat().st_size for p in directory.glob("v1/*/*/*.entry"))
    assert stats["disk"]["refused"] == {"unsigned": 0, "other secret": 0} and not stats["disk"]["signed"]
    assert stats["stages"]["cubin"]["signatures"]["not signed"] == 3
    text = gpucache("--dir", directory, "stats").stdout
    assert "cubin" in text and "total" in text and str(directory) in text
    assert "(unsigned: no GPUCACHE_SECRET" in text and "shared cache" not in text

    rows = json.loads(gpucache("--dir", directory, "--json", "ls", "--kernel", "axpy", "--stage", "cubin").stdout)
    assert sorted(r["config"] for r in rows) == ["sm_80", "sm_86"]
    assert {r["token"] for r in rows} == {r.stages["cubin"].token for r in results[:2]}
    assert json.loads(gpucache("--dir", directory, "--json", "ls", "--older-than", "1d").stdout) == []
    assert len(json.loads(gpucache("--dir", directory, "--json", "ls", "--newer-than", "1h").stdout)) == 8
    assert "copy" in gpucache("--dir", directory, "ls").stdout


@pytest.mark.slow
def test_show_prints_the_header_and_writes_the_artifact(filled, tmp_path):
    directory, results = filled
    token = results[1].stages["cubin"].token
    out = tmp_path / "kernel.cubin"
    text = gpucache("--dir", directory, "show", token[:10], "--out", out).stdout
    assert token in text and "sm_86" in text and "valid     yes" in text and "used" in text
    assert out.read_bytes() == results[1].cubin
    ptx = gpucache("--dir", directory, "show", results[1].stages["ptx"].token).stdout
    assert ".target sm_86" in ptx
    assert "not a token" in gpucache("--dir", directory, "show", "xyz", expect=2).stderr
    assert "no entry" in gpucache("--dir", directory, "show", "abcdef0123", expect=2).stderr


@pytest.mark.slow
def test_verify_finds_and_fixes_damage(filled):
    directory, results = filled
    damaged = next(directory.glob(f"v1/cubin/*/{results[0].stages['cubin'].token}.entry"))
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 1
    damaged.write_bytes(bytes(data))
    report = json.loads(gpucache("--dir", directory, "--json", "verify", expect=1).stdout)
    assert report["checked"] == 8 and len(report["bad"]) == 1 and "checksum" in report["bad"][0]["problem"]
    assert "removed" in gpucache("--dir", directory, "verify", "--fix").stdout
    assert not damaged.exists()
    assert "0 bad" in gpucache("--dir", directory, "verify").stdout


@pytest.mark.slow
def test_prune_and_clear(filled):
    directory, _ = filled
    before = json.loads(gpucache("--dir", directory, "--json", "stats").stdout)["bytes"]
    pruned = json.loads(gpucache("--dir", directory, "--json", "prune", "--max-bytes", before // 2).stdout)
    assert pruned["removed"] > 0 and pruned["bytes"] <= before // 2
    # clear asks first: without a terminal to ask on, it needs --yes
    refused = gpucache("--dir", directory, "clear", "--stage", "llvm", expect=2)
    assert "pass --yes to confirm" in refused.stderr and "llvm" in refused.stderr
    assert json.loads(gpucache("--dir", directory, "--json", "stats").stdout)["stages"]["llvm"]["entries"] > 0
    assert "removed" in gpucache("--dir", directory, "clear", "--stage", "llvm", "--yes").stdout
    stats = json.loads(gpucache("--dir", directory, "--json", "stats").stdout)
    assert stats["stages"]["llvm"]["entries"] == 0
    gpucache("--dir", directory, "clear", "-y")
    assert json.loads(gpucache("--dir", directory, "--json", "stats").stdout)["bytes"] == 0


@pytest.mark.slow
def test_bad_arguments_are_clear(tmp_path):
    assert "500M" in gpucache("--dir", tmp_path, "prune", "--max-bytes", "lots", expect=2).stderr
    assert "invalid choice" in gpucache("--dir", tmp_path, "ls", "--stage", "sass", expect=2).stderr
    assert "7d" in gpucache("--dir", tmp_path, "ls", "--older-than", "soon", expect=2).stderr
    assert "no entries" in gpucache("--dir", tmp_path, "ls").stdout
    # a bad setting is named, with its fix, and no traceback
    done = gpucache("--dir", tmp_path, "stats", expect=2, env={"GPUCACHE_SECRET_PREVIOUS": "old"})
    assert "GPUCACHE_SECRET_PREVIOUS is set but GPUCACHE_SECRET is not" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_options_may_follow_the_command(filled):
    directory, _ = filled
    before = json.loads(gpucache("--dir", directory, "--json", "stats").stdout)
    assert json.loads(gpucache("stats", "--json", "--dir", directory).stdout) == before
    assert json.loads(gpucache("--dir", directory, "ls", "--json", "--stage", "cubin").stdout)


@pytest.mark.slow
def test_a_missing_folder_or_a_cache_turned_off_is_an_error_not_zeros(tmp_path, monkeypatch):
    missing = gpucache("--dir", tmp_path / "nowhere", "stats", expect=2)
    assert "no cache folder at" in missing.stderr and "nowhere" in missing.stderr and not missing.stdout
    # GPUCACHE_DIR=off is read as the API and the magic read it: no disk cache,
    # never a folder named ./off
    monkeypatch.setenv("GPUCACHE_DIR", "off")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "off").mkdir()
    off = gpucache("clear", "--yes", expect=2)
    assert "the disk cache is off" in off.stderr and "--dir" in off.stderr
    monkeypatch.setenv("GPUCACHE_DIR", str(tmp_path / "nowhere"))
    assert "GPUCACHE_DIR" in gpucache("ls", expect=2).stderr


@pytest.mark.slow
def test_output_piped_into_a_reader_that_stops_ends_quietly(filled):
    directory, _ = filled
    # a reader that closes the pipe at once, as head does after its lines
    reader = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.close()"],
                              stdin=subprocess.PIPE)
    writer = subprocess.run([sys.executable, "-m", "gpucache_ext", "--dir", str(directory), "ls"],
                            cwd=ROOT, stdout=reader.stdin, stderr=subprocess.PIPE, text=True, timeout=120)
    reader.stdin.close()
    reader.wait(timeout=30)
    assert writer.returncode == 0, writer.stderr
    assert "Traceback" not in writer.stderr and "BrokenPipe" not in writer.stderr


@pytest.mark.slow
def test_help_is_plain_words():
    for args in (["--help"], ["clear", "--help"], ["ls", "--help"]):
        text = gpucache(*args).stdout
        assert "``" not in text and "usage: gpucache" in text


@pytest.mark.slow
def test_one_token_length_in_the_command_the_report_and_the_inspector(filled):
    from gpucache_ext.tokens import SHORT_TOKEN_DIGITS

    directory, results = filled
    shown = results[0].stages["cubin"].short_token
    assert len(shown) == SHORT_TOKEN_DIGITS
    listed = gpucache("--dir", directory, "ls", "--stage", "cubin").stdout
    assert shown in listed.split()
    (token_file,) = [p for p in directory.glob("v1/cubin/*/*.entry") if p.name.startswith(shown)]
    token_file.write_bytes(b"damaged")
    bad = gpucache("--dir", directory, "verify", expect=1).stdout
    assert f"BAD cubin {shown}:" in bad


@pytest.mark.slow
def test_an_entrys_size_is_the_same_in_ls_show_and_the_cache(filled):
    from gpucache_ext import KernelCache
    from gpucache_ext.units import format_bytes

    directory, results = filled
    token = results[0].stages["cubin"].token
    (row,) = [r for r in json.loads(gpucache("--dir", directory, "--json", "ls", "--stage", "cubin").stdout)
              if r["token"] == token]
    shown = gpucache("--dir", directory, "show", token[:12]).stdout
    entry = KernelCache(directory=directory).entry("cubin", token)
    assert row["bytes"] == entry.nbytes and f"size      {format_bytes(entry.nbytes)}" in shown
    assert row["file_bytes"] > row["bytes"]  # the file adds the header


@pytest.mark.slow
def test_the_stage_option_has_one_name_and_the_old_one_still_works(tmp_path, capsys):
    from gpucache_ext import cli

    directory = tmp_path / "cache"
    (directory / "v1").mkdir(parents=True)
    assert cli.main(["--dir", str(directory), "ls", "--stage", "ptx", "--json"]) == 0
    by_stage = capsys.readouterr().out
    assert cli.main(["--dir", str(directory), "ls", "--layer", "ptx", "--json"]) == 0
    assert capsys.readouterr().out == by_stage
    with pytest.raises(SystemExit):
        cli.main(["ls", "--help"])
    shown = capsys.readouterr().out
    assert "--stage" in shown and "--layer" not in shown


@pytest.mark.slow
def test_verify_signs_again_what_a_previous_secret_signed_and_removes_unsigned_entries(tmp_path):
    first = KernelCache(directory=tmp_path, secret="old").compile(kernels.copy, kernels.COPY_SIG,
                                                                  CompileConfig(sm=86))
    # written without a secret: unsigned (the llvm entry is sm_86's, read unchecked)
    planted = KernelCache(directory=tmp_path, secret="").compile(kernels.copy, kernels.COPY_SIG,
                                                                 CompileConfig(sm=80))
    unsigned = [s for s in ("llvm", "ptx", "cubin") if not planted.stages[s].hit]
    assert "cubin" in unsigned
    rotated = {"GPUCACHE_SECRET": "new", "GPUCACHE_SECRET_PREVIOUS": "old"}

    stats = json.loads(gpucache("--dir", tmp_path, "--json", "stats", env=rotated).stdout)
    assert stats["disk"]["signed"] and stats["disk"]["previous_secret"] == 3
    assert stats["disk"]["refused"] == {"unsigned": len(unsigned), "other secret": 0}
    only_new = json.loads(gpucache("--dir", tmp_path, "--json", "stats", env={"GPUCACHE_SECRET": "new"}).stdout)
    assert only_new["disk"]["refused"] == {"unsigned": len(unsigned), "other secret": 3}

    report = json.loads(gpucache("--dir", tmp_path, "--json", "verify", env=rotated, expect=1).stdout)
    assert report["previous_secret"] == 3 and report["resigned"] == 0 and len(report["bad"]) == len(unsigned)
    assert "--fix signs them again" in gpucache("--dir", tmp_path, "verify", env=rotated, expect=1).stdout
    fixed = gpucache("--dir", tmp_path, "verify", "--fix", env=rotated).stdout
    assert "3 entries signed with a previous secret: signed again with GPUCACHE_SECRET" in fixed

    after = json.loads(gpucache("--dir", tmp_path, "--json", "verify", env={"GPUCACHE_SECRET": "new"}).stdout)
    assert after["checked"] == 3 and after["bad"] == [] and after["previous_secret"] == 0
    result = KernelCache(directory=tmp_path, secret="new").compile(kernels.copy, kernels.COPY_SIG,
                                                                   CompileConfig(sm=86))
    assert [result.stages[s].tier for s in ("llvm", "ptx", "cubin")] == ["disk"] * 3
    assert result.cubin == first.cubin


# -- the quick sample: every command in this process, the entry point once ---------------


def test_the_commands_in_this_process_and_the_entry_point(filled, gpucache_cli, tmp_path, monkeypatch):
    directory, results = filled
    stats = gpucache_cli("--dir", directory, "--json", "stats")
    assert stats["stages"]["cubin"]["entries"] == 3 and stats["stages"]["llvm"]["entries"] == 2
    assert stats["bytes"] == sum(p.stat().st_size for p in directory.glob("v1/*/*/*.entry"))
    text, _ = gpucache_cli("stats", "--dir", directory)  # options after the command too
    assert "cubin" in text and "total" in text and str(directory) in text

    rows = gpucache_cli("--dir", directory, "--json", "ls", "--kernel", "axpy", "--stage", "cubin")
    assert sorted(r["config"] for r in rows) == ["sm_80", "sm_86"]
    assert {r["token"] for r in rows} == {r.stages["cubin"].token for r in results[:2]}
    assert "copy" in gpucache_cli("--dir", directory, "ls")[0]

    token = results[1].stages["cubin"].token
    out = tmp_path / "kernel.cubin"
    text, _ = gpucache_cli("--dir", directory, "show", token[:10], "--out", out)
    assert token in text and "sm_86" in text and "valid     yes" in text
    assert out.read_bytes() == results[1].cubin
    assert "not a token" in gpucache_cli("--dir", directory, "show", "xyz", expect=2)[1]
    a, b = (r.stages["ptx"].token for r in results[:2])
    assert "sm_80" in gpucache_cli("--dir", directory, "diff", a[:8], b[:8], "--stage", "ptx")[0]

    damaged = next(directory.glob(f"v1/cubin/*/{results[0].stages['cubin'].token}.entry"))
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 1
    damaged.write_bytes(bytes(data))
    report = gpucache_cli("--dir", directory, "--json", "verify", expect=1)
    assert report["checked"] == 8 and len(report["bad"]) == 1 and "checksum" in report["bad"][0]["problem"]
    assert "removed" in gpucache_cli("--dir", directory, "verify", "--fix")[0] and not damaged.exists()

    before = gpucache_cli("--dir", directory, "--json", "stats")["bytes"]
    pruned = gpucache_cli("--dir", directory, "--json", "prune", "--max-bytes", before // 2)
    assert pruned["removed"] > 0 and pruned["bytes"] <= before // 2
    monkeypatch.setattr(sys, "stdin", io.StringIO())  # no terminal to ask on: clear needs --yes
    assert "pass --yes to confirm" in gpucache_cli("--dir", directory, "clear", expect=2)[1]
    assert gpucache_cli("--dir", directory, "--json", "clear", "--yes")["removed"] > 0
    assert gpucache_cli("--dir", directory, "--json", "stats")["bytes"] == 0
    assert "no cache folder at" in gpucache_cli("--dir", tmp_path / "nowhere", "stats", expect=2)[1]

    # the installed entry point, as a user runs it (`python -m gpucache_ext`)
    done = gpucache("--dir", directory, "ls", "--older-than", "soon", expect=2)
    assert "7d" in done.stderr and "Traceback" not in done.stderr
