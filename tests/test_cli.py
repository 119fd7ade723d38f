"""The gpucache command, run as a real subprocess on a real cache directory
(`slow`); the quick sample at the end runs its commands in this process
(`cli.main`) and the entry point once as a subprocess."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpucache_ext import CompileConfig, KernelCache

from . import kernels
from .helpers import buildable, gpucache

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def filled(tmp_path):
    cache = KernelCache(directory=tmp_path)
    results = [cache.compile(kernels.axpy, kernels.AXPY_SIG, CompileConfig(sm=sm)) for sm in (80, 86)]
    results.append(cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86, opt=1)))
    return tmp_path, results


@pytest.mark.slow
@pytest.mark.smoke
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
    from gpucache_ext.keys.tokens import SHORT_TOKEN_DIGITS

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
def test_the_stage_option_has_one_name(tmp_path, capsys):
    from gpucache_ext import cli

    directory = tmp_path / "cache"
    (directory / "v1").mkdir(parents=True)
    assert cli.main(["--dir", str(directory), "ls", "--stage", "ptx", "--json"]) == 0
    assert capsys.readouterr().out.strip() == "[]"
    with pytest.raises(SystemExit):
        cli.main(["--dir", str(directory), "ls", "--layer", "ptx"])
    assert "unrecognized arguments: --layer" in capsys.readouterr().err
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


# -- export: the artifact of an entry of any stage; ls: every config field whole ----------


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    """A cache folder holding a kernel built with a long config (one target, no
    fatbin), a fatbin of another, an lto build (LTO-IR) and a kernel whose
    lowering asked about the target (its llvm token holds a per-target marker)."""
    folder = tmp_path_factory.mktemp("variants")
    cache = KernelCache(directory=folder)
    long = CompileConfig(sm=86, fastmath=True, max_registers=32, launch_bounds=(200, 2))
    built = {
        "long": cache.compile(kernels.axpy, kernels.AXPY_SIG, long),
        "fatbin": cache.compile_fatbin(kernels.copy, kernels.COPY_SIG, sms="80,86"),
        "lto": cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=86, lto=True)),
        "tanh": [cache.compile(kernels.tanh_kernel, kernels.TANH_SIG, CompileConfig(sm=sm, fastmath=True))
                 for sm in buildable((70, 75, 86))[:2]],  # (CUDA 13: both read tanh's target alike)
    }
    return folder, built


def test_export_writes_the_artifact_of_an_entry_of_any_stage_by_its_token(variants, gpucache_cli, tmp_path):
    folder, built = variants
    long, fatbin, lto = built["long"], built["fatbin"], built["lto"]
    wanted = {  # stage: (token, what export must write, its format)
        "fatbin": (fatbin.fatbin_stage.token, fatbin.fatbin, "fatbin"),
        "cubin": (long.stages["cubin"].token, long.cubin, "cubin"),
        "ptx": (long.stages["ptx"].token, long.ptx.encode(), "ptx"),
        "llvm": (long.stages["llvm"].token, long.llvm_ir.encode(), "llvm"),
    }
    for stage, (token, data, kind) in wanted.items():
        out = tmp_path / f"by-token.{stage}"
        report = gpucache_cli("--dir", folder, "--json", "export", token[:10], out)
        assert out.read_bytes() == data, stage
        assert (report["stage"], report["format"], report["token"], report["bytes"]) == (stage, kind, token, len(data))
        assert report["config"] == ("sm_80,86 +ptx 80" if stage == "fatbin" else long.config.summary())
        assert ("members" in report) == (stage == "fatbin")
    assert wanted["cubin"][1][:4] == b"\x7fELF" and b".target sm_86" in wanted["ptx"][1]
    assert wanted["llvm"][1].startswith(b"; ModuleID")
    text, _ = gpucache_cli("--dir", folder, "export", long.stages["cubin"].token[:8], tmp_path / "axpy.cubin")
    assert f"wrote {tmp_path / 'axpy.cubin'}" in text and "cubin ELF" in text and "max_registers=32" in text
    # an lto build's ptx entry holds LTO-IR, not PTX text: its bytes are written
    report = gpucache_cli("--dir", folder, "--json", "export", lto.stages["ptx"].token[:10], tmp_path / "k.ltoir")
    assert report["format"] == "ltoir" and (tmp_path / "k.ltoir").read_bytes() == lto.ltoir


def test_export_refuses_a_typing_token_and_says_which_stages_it_can_export(variants, gpucache_cli, tmp_path):
    folder, built = variants
    long = built["long"]
    typing = long.stages["typing"].token
    out = tmp_path / "typed"
    _, err = gpucache_cli("--dir", folder, "export", typing[:12], out, expect=2)
    assert f"{typing[:12]} is the token of a typing entry" in err and "fatbin, cubin, ptx, mlir or llvm" in err
    # and names the entry built from it, with the command that exports it
    assert f"gpucache export {long.stages['llvm'].short_token} axpy.ll" in err and not out.exists()


def test_export_by_name_is_the_fatbin_and_without_one_points_to_the_cubin_tokens(variants, gpucache_cli, tmp_path):
    folder, built = variants
    out = tmp_path / "copy.fatbin"
    report = gpucache_cli("--dir", folder, "--json", "export", "copy", out)
    assert report["stage"] == "fatbin" and out.read_bytes() == built["fatbin"].fatbin
    assert [m["name"] for m in report["members"]] == ["sm_80", "sm_86", "compute_80"]
    # axpy was built for one target: no fatbin, but a cubin to export by its token
    _, err = gpucache_cli("--dir", folder, "export", "axpy", tmp_path / "axpy.fatbin", expect=2)
    cubin = built["long"].stages["cubin"].short_token
    assert "axpy has no fatbin" in err and "KernelCache.compile_fatbin" in err and "1 cubin entry" in err
    assert f"gpucache export {cubin} axpy.cubin" in err and "gpucache ls --kernel axpy --stage cubin" in err
    assert not (tmp_path / "axpy.fatbin").exists()
    _, err = gpucache_cli("--dir", folder, "export", "tanh_kernel", tmp_path / "t", expect=2)
    assert "2 cubin entries" in err and all(r.stages["cubin"].short_token in err for r in built["tanh"])
    _, err = gpucache_cli("--dir", folder, "export", "nothere", tmp_path / "x", expect=2)
    assert "no fatbin of a kernel or token 'nothere'" in err and "by its token" in err
    _, err = gpucache_cli("--dir", folder, "export", "abcdef0123", tmp_path / "x", expect=2)
    assert "no entry with a token starting abcdef0123" in err and "fatbin, cubin, ptx, mlir or llvm" in err


def test_export_keeps_the_fatbin_option_and_checks_the_file(variants, gpucache_cli, tmp_path):
    folder, built = variants
    fatbin, cubin = built["fatbin"].fatbin_stage.token, built["long"].stages["cubin"].token
    gpucache_cli("--dir", folder, "export", "copy", "--fatbin", tmp_path / "old-form.fatbin")
    assert (tmp_path / "old-form.fatbin").read_bytes() == built["fatbin"].fatbin
    gpucache_cli("--dir", folder, "export", fatbin[:8], "--fatbin", tmp_path / "by-token.fatbin")
    assert (tmp_path / "by-token.fatbin").read_bytes() == built["fatbin"].fatbin
    _, err = gpucache_cli("--dir", folder, "export", cubin[:8], "--fatbin", tmp_path / "k.cubin", expect=2)
    assert "--fatbin FILE writes a fatbin" in err and "is a cubin entry" in err
    assert f"gpucache export {cubin[:12]} {tmp_path / 'k.cubin'}" in err and not (tmp_path / "k.cubin").exists()
    assert "give the file to write: gpucache export NAME_OR_TOKEN FILE" in gpucache_cli(
        "--dir", folder, "export", cubin[:8], expect=2)[1]
    assert "not both" in gpucache_cli("--dir", folder, "export", "copy", tmp_path / "a", "--fatbin",
                                      tmp_path / "b", expect=2)[1]
    assert f"cannot write {tmp_path}" in gpucache_cli("--dir", folder, "export", cubin[:8], tmp_path, expect=2)[1]


def test_export_of_a_per_target_marker_names_the_entries_to_export(variants, gpucache_cli, tmp_path):
    folder, built = variants
    from gpucache_ext.store.codec import read_header

    per_target = {r.stages["llvm"].token for r in built["tanh"]}  # (a compile reports the entry it used)
    headers = [read_header(path.read_bytes())[0] for path in folder.glob("v1/llvm/*/*.entry")]
    (marker,) = [h["token"][:12] for h in headers if h["marker"]]
    assert marker not in {token[:12] for token in per_target}
    _, err = gpucache_cli("--dir", folder, "export", marker, tmp_path / "t.ll", expect=2)
    assert "holds no code" in err and "filed per target" in err and "cc>=(7, 5)" in err
    assert all(token[:12] in err for token in per_target) and not (tmp_path / "t.ll").exists()


def test_ls_shows_every_config_field_whole(variants, gpucache_cli):
    folder, built = variants
    summary = built["long"].config.summary()
    assert summary == "sm_86 fastmath=True max_registers=32 launch_bounds=(200, 2)"
    text, _ = gpucache_cli("--dir", folder, "ls", "--kernel", "axpy")
    lines = text.splitlines()
    header, rows = lines[0], lines[1:]
    start, end = header.index("config"), header.index("size") - 7  # (size: 10 wide, right-aligned)
    # the config column of each entry (its first line and the lines under it), field by field
    columns, current = [], None
    for line in rows:
        if line[:start].strip():
            current = []
            columns.append(current)
        current.append(line[start:end].strip())
    assert len(columns) == 3  # llvm, ptx, cubin
    fields = ["sm_86", "fastmath=True", "max_registers=32", "launch_bounds=(200, 2)"]
    whole = {" ".join(fields[i:j]) for i in range(len(fields)) for j in range(i + 1, len(fields) + 1)}
    for column in columns:
        assert " ".join(column) == summary  # nothing cut off
        assert len(column) > 1 and set(column) <= whole  # wrapped, between fields only
    # the machine-readable listing carries the whole summary on one line
    rows = gpucache_cli("--dir", folder, "--json", "ls", "--kernel", "axpy")
    assert {row["config"] for row in rows} == {summary}
    fatbins = gpucache_cli("--dir", folder, "--json", "ls", "--stage", "fatbin")
    assert [row["config"] for row in fatbins] == ["sm_80,86 +ptx 80"]
    assert "sm_80,86 +ptx 80" in gpucache_cli("--dir", folder, "ls", "--stage", "fatbin")[0]


def test_ls_wraps_a_config_between_fields_never_inside_one():
    from gpucache_ext.cli.listing import _CONFIG_WIDTH, _wrap_fields
    from gpucache_ext.keys.config import summary_fields as _config_fields

    summary = CompileConfig(sm=86, opt=1, fastmath=True, ftz=False, lineinfo=True, max_registers=64,
                            launch_bounds=(256, 2)).summary()
    fields = _config_fields(summary)
    assert fields == ["sm_86", "opt=1", "fastmath=True", "ftz=False", "lineinfo=True", "max_registers=64",
                      "launch_bounds=(256, 2)"]
    lines = _wrap_fields(fields, _CONFIG_WIDTH)
    assert " ".join(lines) == summary and all(len(line) <= _CONFIG_WIDTH for line in lines)
    assert [f for line in lines for f in _config_fields(line)] == fields
    # a fatbin's targets are one field; a field longer than the column has a line of its own
    assert _config_fields("sm_80,86,90 +ptx 80 max_registers=32") == ["sm_80,86,90 +ptx 80", "max_registers=32"]
    assert _wrap_fields(["sm_86", "x" * 50, "opt=1"], 20) == ["sm_86", "x" * 50, "opt=1"]


def test_ls_names_each_definition_once_and_tells_two_of_one_name_apart(tmp_path, gpucache_cli):
    """Two files define `copy` (one qualified name, two definitions): ls tells
    them apart by file; one definition's versions keep one name."""
    from gpucache_ext import CompileConfig, KernelCache

    from .helpers import notebook_namespace, run_cell

    folder = tmp_path / "cache"
    cache = KernelCache(directory=folder)
    for name, body in (("first.py", "r[0] = x[0]"), ("second.py", "r[0] = x[0] + 1")):
        source = f"def copy(r, x):\n    {body}\n"
        (tmp_path / name).write_text(source)
        namespace = notebook_namespace()
        run_cell(namespace, source, filename=str(tmp_path / name))
        for sm in (80, 86):  # versions of one definition: one name
            cache.compile(namespace["copy"], "void(float32[:], float32[:])", CompileConfig(sm=sm))
    text, _ = gpucache_cli("--dir", folder, "ls", "--kernel", "copy")
    names = [line.split()[2] for line in text.splitlines()[1:] if line[:1].strip()]
    assert len(names) == 10 and set(names) == {"copy@first.py", "copy@second.py"}  # (one llvm each: sm not read)
    rows = gpucache_cli("--dir", folder, "--json", "ls", "--kernel", "copy")
    assert {row["place"] for row in rows} == {f"file:{os.path.realpath(tmp_path / name)}"
                                             for name in ("first.py", "second.py")}


def test_show_of_a_cubin_gives_its_occupancy_at_common_block_sizes(variants, gpucache_cli):
    """What the calculator says for the cubin's own registers and shared
    memory on its architecture; other stages have none."""
    from gpucache_ext.occupancy import occupancy

    folder, built = variants
    long = built["long"]
    used = long.resources
    text, _ = gpucache_cli("--dir", folder, "show", long.stages["cubin"].token[:12])
    assert f"theoretical occupancy on sm_86 ({used['registers']} registers a thread" in text
    assert "launch bounds allow at most 200 threads a block" in text  # (launch_bounds=(200, 2))
    for block in (64, 128):
        expected = occupancy((8, 6), block, used["registers"], used["shared_bytes"])
        assert f"{block:>5} threads  {expected}" in text
    assert "  256 threads" not in text  # more than the launch bounds allow: no such launch
    shown = gpucache_cli("--dir", folder, "--json", "show", long.stages["cubin"].token[:12])
    assert [(row["block"], row["active_warps"]) for row in shown["occupancy"]] == [
        (block, occupancy((8, 6), block, used["registers"], used["shared_bytes"]).active_warps)
        for block in (64, 128)]
    fatbin_member = built["fatbin"].per_target[80]
    text, _ = gpucache_cli("--dir", folder, "show", fatbin_member.stages["cubin"].token[:12])
    registers = fatbin_member.resources["registers"]
    for block in (64, 128, 256, 512, 1024):
        assert f"{block:>5} threads  {occupancy((8, 0), block, registers)}" in text
    ptx, _ = gpucache_cli("--dir", folder, "show", long.stages["ptx"].token[:12])
    assert "occupancy" not in ptx
