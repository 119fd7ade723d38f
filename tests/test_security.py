"""Issue 11, "the shared tier is secure by default", end to end: a real
redis-server on loopback, real folders, and every cache built in a process of
its own (tests/security_child.py), the three ways users build one: the
constructor, `KernelCache.from_environment` and the ``%%gpukernel`` magic.

A writer process fills the store, then reader processes read it, each with
the settings of its case in its environment (``GPUCACHE_SECRET``,
``GPUCACHE_SECRET_PREVIOUS``, ``GPUCACHE_SHARED_UNSIGNED``,
``GPUCACHE_REDIS_PREFIX``, ``GPUCACHE_REDIS_TTL``, ``GPUCACHE_DIR``).  What
the store holds is read with redis-py, what the folders hold with `os`.
"""

import json
import os
import stat
import subprocess
import sys

import pytest

from gpucache_ext.store.signing import OTHER_SECRET, SIGNED_MAGIC, UNSIGNED, key_id

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD = "from tests.security_child import main; main()"
PERSISTENT = ("llvm", "ptx", "cubin")
SM = 86


# -- the processes -------------------------------------------------------------
def start(jobs, env=None, umask=-1):
    """A child running `jobs` (see tests/security_child.py) in this process's
    environment less every GPUCACHE_* setting, plus `env`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUCACHE_")}
    base.update(PYTHONPATH=ROOT, GPUCACHE_DIR="off")
    for name, value in (env or {}).items():
        if value is None:
            base.pop(name, None)
        else:
            base[name] = value
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(jobs)], cwd=ROOT, env=base, umask=umask,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc, timeout=180):
    """The child's reports, one per job."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"child failed ({proc.returncode}):\n{out[-3000:]}\n{err[-6000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def run(jobs, env=None, umask=-1):
    return finish(start(jobs, env, umask))


def compiles(kernel="axpy", sm=SM):
    return {"do": "compile", "kernel": kernel, "sm": sm}


def job(way, url=None, env=None, steps=(), **kwargs):
    """A job building its cache `way`: the constructor is given `url`; the
    other ways read it from GPUCACHE_REDIS_URL (set it in the child's env)."""
    if way == "constructor" and url is not None:
        kwargs["redis_url"] = url
    return {"way": way, "env": env or {}, "kwargs": kwargs, "steps": list(steps) or [compiles()]}


def security_warnings(report):
    return [w["message"] for w in report["warnings"] if w["category"] == "SecurityWarning"]


def tiers_of(step, stage, name="shared"):
    return step["tiers"][stage].get(name)


def hit_tiers(step):
    return [step["stages"][s]["tier"] for s in PERSISTENT]


def rejected(step, name="shared"):
    return {s: tiers_of(step, s, name)["rejected_by"] for s in PERSISTENT}


# -- what the store holds ------------------------------------------------------
def client_for(server):
    import redis

    return redis.Redis.from_url(server.url)


def stored(client, prefix):
    """key -> value of every entry under `prefix`."""
    return {key.decode(): client.get(key) for key in client.scan_iter(match=f"{prefix}:*")}


def signer(value, secrets):
    """Who signed a stored entry: the name of the secret in `secrets`, or "unsigned"."""
    if not value.startswith(b"GPUCSIG"):
        return "unsigned"
    names = {key_id(secret.encode()): name for name, secret in secrets.items()}
    return names.get(value[8:16], "?") if value.startswith(SIGNED_MAGIC) else "?"


def stages_stored(entries, prefix):
    """The stages of the keys `entries` holds, each checked to read <prefix>:v1:<stage>:<token>."""
    found = []
    for key in entries:
        head, version, stage, token = key.rsplit(":", 3)
        assert (head, version, len(token)) == (prefix, "v1", 64), key
        found.append(stage)
    return sorted(found)


# -- 1. the matrix -----------------------------------------------------------
WAYS = ("constructor", "environment", "magic")
SECRETS = {"secret": "team-secret", "other": "rival-secret"}
KINDS = {  # what a writer or a reader sets
    "secret": {"GPUCACHE_SECRET": SECRETS["secret"]},
    "none": {},  # no secret and no opt-in: the shared tier is not used
    "unsigned": {"GPUCACHE_SHARED_UNSIGNED": "1"},
    "other": {"GPUCACHE_SECRET": SECRETS["other"]},
}
HIT, MISS, NOT_USED = "hit", "miss", "not used"
# reader -> writer -> what the reader's lookups of the writer's entries give
MATRIX = {
    "secret": {"secret": HIT, "none": MISS, "unsigned": UNSIGNED, "other": OTHER_SECRET},
    "none": {"secret": NOT_USED, "none": NOT_USED, "unsigned": NOT_USED, "other": NOT_USED},
    "unsigned": {"secret": HIT, "none": MISS, "unsigned": HIT, "other": HIT},
    "other": {"secret": OTHER_SECRET, "none": MISS, "unsigned": UNSIGNED, "other": HIT},
}


def prefix_of(way, writer, reader):
    """Each (writer, reader) pair has entries of its own: a reader that refuses
    an entry compiles again and replaces it, which no other reader may see."""
    return f"{way}.w-{writer}.r-{reader}"


def matrix_jobs(way, url, role):
    jobs = []
    for writer in KINDS:
        for reader in KINDS:
            kind = writer if role == "writer" else reader
            jobs.append(job(way, url, {**KINDS[kind], "GPUCACHE_REDIS_PREFIX": prefix_of(way, writer, reader)}))
    return jobs


def outcome(report):
    """What a reader's report says happened to its lookups in the shared tier."""
    step = report["steps"][0]
    if any(tiers_of(step, s) is None for s in PERSISTENT):
        return NOT_USED
    if hit_tiers(step) == ["shared"] * 3:
        return HIT
    refusals = rejected(step)
    if not any(refusals.values()):
        return MISS
    reasons = {reason for by in refusals.values() for reason in by}
    return reasons.pop() if len(reasons) == 1 else repr(refusals)


@pytest.mark.slow  # (six processes: 10-25 s)
def test_the_matrix_of_writers_and_readers_each_way_a_cache_is_built(redis_server):
    client = client_for(redis_server)
    env = {"GPUCACHE_REDIS_URL": redis_server.url}
    pairs = [(writer, reader) for writer in KINDS for reader in KINDS]

    procs = {way: start(matrix_jobs(way, redis_server.url, "writer"), env) for way in WAYS}
    writers = {way: dict(zip(pairs, finish(proc))) for way, proc in procs.items()}
    written = {way: {pair: stored(client, prefix_of(way, *pair)) for pair in pairs} for way in WAYS}
    procs = {way: start(matrix_jobs(way, redis_server.url, "reader"), env) for way in WAYS}
    readers = {way: dict(zip(pairs, finish(proc))) for way, proc in procs.items()}

    for way in WAYS:
        cubins = {report["steps"][0]["cubin"] for report in writers[way].values()}
        assert len(cubins) == 1, (way, cubins)  # every writer compiled the same kernel
        for (writer, reader), report in writers[way].items():
            step, entries = report["steps"][0], written[way][writer, reader]
            assert not any(s["hit"] for s in step["stages"].values()), (way, writer)
            if writer == "none":  # not used, and said so: nothing written
                assert entries == {}, (way, writer, sorted(entries))
                assert [info["used"] for info in report["tier_info"]] == [False]
                [message] = security_warnings(report)
                assert "GPUCACHE_SECRET" in message and "GPUCACHE_SHARED_UNSIGNED=1" in message
            else:
                assert security_warnings(report) == [], (way, writer)
                assert stages_stored(entries, prefix_of(way, writer, reader)) == ["cubin", "llvm", "ptx"]
                assert {signer(v, SECRETS) for v in entries.values()} == {writer}, (way, writer)
                assert [(i["used"], i["signed"]) for i in report["tier_info"]] == [(True, writer != "unsigned")]

    observed = {way: {reader: {writer: outcome(readers[way][writer, reader]) for writer in KINDS}
                      for reader in KINDS} for way in WAYS}
    assert observed == dict.fromkeys(WAYS, MATRIX)

    for way in WAYS:
        [cubin] = {report["steps"][0]["cubin"] for report in writers[way].values()}
        for (writer, reader), report in readers[way].items():
            step, expected = report["steps"][0], MATRIX[reader][writer]
            case = (way, writer, reader)
            assert step["cubin"] == cubin, case  # a refusal compiles the same code again
            assert bool(security_warnings(report)) == (reader == "none"), case
            after = stored(client, prefix_of(way, writer, reader))
            if expected in (HIT, NOT_USED):  # nothing compiled into the store, or nothing to write to
                assert after == written[way][writer, reader], case
            else:  # compiled again and stored, as this reader signs
                assert stages_stored(after, prefix_of(way, writer, reader)) == ["cubin", "llvm", "ptx"], case
                assert {signer(v, SECRETS) for v in after.values()} == {reader}, case
            if expected == NOT_USED:
                assert [(i["name"], i["used"]) for i in report["tier_info"]] == [("shared", False)], case
            elif expected in (UNSIGNED, OTHER_SECRET):  # one refusal a stage, counted by its reason
                assert rejected(step) == dict.fromkeys(PERSISTENT, {expected: 1}), case
                assert not any(step["stages"][s]["hit"] for s in PERSISTENT), case
            else:
                assert rejected(step) == dict.fromkeys(PERSISTENT, {}), case


# -- 2. rotation ---------------------------------------------------------------
@pytest.mark.slow
def test_rotation_reads_the_previous_secret_and_signs_with_the_new_one(redis_server):
    client = client_for(redis_server)
    env = {"GPUCACHE_REDIS_URL": redis_server.url}
    old, new = {"GPUCACHE_SECRET": "old-secret"}, {"GPUCACHE_SECRET": "new-secret"}
    rotated = {**new, "GPUCACHE_SECRET_PREVIOUS": "old-secret"}
    names = {"old": "old-secret", "new": "new-secret"}

    [written] = run([job("environment", env=old)], env)
    [reading] = run([job("environment", env=rotated, steps=[compiles("axpy"), compiles("copy")])], env)
    hit, fresh = reading["steps"]
    assert hit_tiers(hit) == ["shared"] * 3 and hit["cubin"] == written["steps"][0]["cubin"]
    assert {s: tiers_of(hit, s)["previous_secret"] for s in PERSISTENT} == dict.fromkeys(PERSISTENT, 1)
    assert rejected(hit) == dict.fromkeys(PERSISTENT, {})
    assert not any(fresh["stages"][s]["hit"] for s in PERSISTENT)  # copy: compiled, and written...
    by_token = {key.rsplit(":", 1)[1]: signer(value, names) for key, value in stored(client, "gpucache").items()}
    assert [by_token[fresh["stages"][s]["token"]] for s in PERSISTENT] == ["new"] * 3  # ...signed with the new
    assert [by_token[hit["stages"][s]["token"]] for s in PERSISTENT] == ["old"] * 3  # (a hit is not signed again)

    only_new, only_old = run([job("environment", env=new, steps=[compiles("copy"), compiles("axpy")]),
                              job("environment", env=old, steps=[compiles("copy")])], env)
    assert hit_tiers(only_new["steps"][0]) == ["shared"] * 3
    assert tiers_of(only_new["steps"][0], "cubin")["previous_secret"] == 0
    # the retired secret, no longer given, is a secret this reader does not hold
    assert rejected(only_new["steps"][1]) == dict.fromkeys(PERSISTENT, {OTHER_SECRET: 1})
    assert rejected(only_old["steps"][0]) == dict.fromkeys(PERSISTENT, {OTHER_SECRET: 1})
    assert only_old["steps"][0]["cubin"] == only_new["steps"][0]["cubin"]


# -- 3. namespaces -------------------------------------------------------------
@pytest.mark.slow
def test_two_prefixes_on_one_server_never_see_each_others_entries(redis_server):
    client = client_for(redis_server)
    env = {"GPUCACHE_REDIS_URL": redis_server.url, "GPUCACHE_SECRET": "shared-by-both"}
    team_a = {"GPUCACHE_REDIS_PREFIX": None}  # the default prefix, gpucache
    team_b = {"GPUCACHE_REDIS_PREFIX": "team-b"}
    run([job("environment", env=team_a, steps=[compiles("axpy")]),
         job("constructor", redis_server.url, team_b, steps=[compiles("copy")])], env)
    assert stages_stored(stored(client, "gpucache"), "gpucache") == ["cubin", "llvm", "ptx"]
    assert stages_stored(stored(client, "team-b"), "team-b") == ["cubin", "llvm", "ptx"]
    assert client.dbsize() == 6

    listing = [{"do": "entries"}]
    a, b = run([job("environment", env=team_a, steps=listing + [compiles("copy")]),
                job("constructor", redis_server.url, team_b, steps=listing + [compiles("axpy"), {"do": "clear"}])],
               env)
    for report, mine in ((a, "axpy"), (b, "copy")):
        shown, compiled = report["steps"][0], report["steps"][1]
        assert shown["entries"] == [[s, mine, ["shared"]] for s in ("cubin", "llvm", "ptx")]
        assert {s: tiers_of(shown, s)["entries"] for s in PERSISTENT} == dict.fromkeys(PERSISTENT, 1)
        # the other team's kernel is there, under the other prefix: not a hit, and not refused either
        assert not any(compiled["stages"][s]["hit"] for s in PERSISTENT)
        assert rejected(compiled) == dict.fromkeys(PERSISTENT, {})
    assert {s: tiers_of(b["steps"][2], s)["entries"] for s in PERSISTENT} == dict.fromkeys(PERSISTENT, 0)
    assert stored(client, "team-b") == {}  # cleared, and team a's four entries a stage...
    kernels_left = run([job("environment", env=team_a, steps=listing)], env)[0]["steps"][0]["entries"]
    assert kernels_left == sorted([s, k, ["shared"]] for s in PERSISTENT for k in ("axpy", "copy"))  # ...kept


# -- 4. expiry -----------------------------------------------------------------
@pytest.mark.slow
def test_redis_ttl_gives_every_key_an_expiry(redis_server):
    client = client_for(redis_server)
    env = {"GPUCACHE_REDIS_URL": redis_server.url, "GPUCACHE_SECRET": "s"}
    run([job("environment", env={"GPUCACHE_REDIS_TTL": "1h", "GPUCACHE_REDIS_PREFIX": "hour"}),
         job("constructor", redis_server.url, {"GPUCACHE_REDIS_TTL": "90m", "GPUCACHE_REDIS_PREFIX": "ninety"}),
         job("environment", env={"GPUCACHE_REDIS_PREFIX": "forever"})], env)
    for prefix, seconds in (("hour", 3600), ("ninety", 5400)):
        ttls = [client.ttl(key) for key in stored(client, prefix)]
        assert len(ttls) == 3 and all(seconds - 120 < ttl <= seconds for ttl in ttls), (prefix, ttls)
    assert [client.ttl(key) for key in stored(client, "forever")] == [-1] * 3  # no TTL: no expiry


# -- 5. the disk tier signs too -------------------------------------------------
def disk_entries(directory):
    """stage -> [first bytes of each entry file]."""
    found = {}
    for stage in PERSISTENT:
        for path in sorted((directory / "v1" / stage).glob("*/*.entry")):
            found.setdefault(stage, []).append(path.read_bytes()[:16])
    return found


@pytest.mark.slow
def test_a_disk_entry_planted_without_the_secret_is_refused_and_signed_ones_are_read(tmp_path):
    disk = tmp_path / "disk"
    env = {"GPUCACHE_DIR": str(disk)}
    [planted] = run([job("environment", env={})], env)  # another writer, without the secret
    heads = disk_entries(disk)
    assert sorted(heads) == ["cubin", "llvm", "ptx"]
    assert not any(head.startswith(b"GPUCSIG") for found in heads.values() for head in found)

    secret = {"GPUCACHE_SECRET": "disk-secret"}
    [checked] = run([job("environment", env=secret)], env)
    step = checked["steps"][0]
    assert not any(step["stages"][s]["hit"] for s in PERSISTENT)
    assert rejected(step, "disk") == dict.fromkeys(PERSISTENT, {UNSIGNED: 1})
    assert step["cubin"] == planted["steps"][0]["cubin"]
    signed = SIGNED_MAGIC + key_id(b"disk-secret")
    assert disk_entries(disk) == dict.fromkeys(PERSISTENT, [signed])  # compiled again, and signed

    [again] = run([job("environment", env=secret)], env)
    step = again["steps"][0]
    assert hit_tiers(step) == ["disk"] * 3 and step["cubin"] == planted["steps"][0]["cubin"]
    assert rejected(step, "disk") == dict.fromkeys(PERSISTENT, {})


# -- 6. who can write to the folder ---------------------------------------------
@pytest.mark.parametrize("mode, who", [(0o777, "everyone"), (0o770, "its group")], ids=["0777", "0770"])
def test_a_folder_others_can_write_to_warns_unless_entries_are_signed(tmp_path, mode, who):
    folder = tmp_path / "cache"
    folder.mkdir()
    folder.chmod(mode)
    nothing = [{"do": "entries"}]
    unsigned_env, unsigned_ctor, signed_env, signed_ctor = run([
        job("environment", env={"GPUCACHE_DIR": str(folder)}, steps=nothing),
        job("constructor", directory=str(folder), steps=nothing),
        job("environment", env={"GPUCACHE_DIR": str(folder), "GPUCACHE_SECRET": "s"}, steps=nothing),
        job("constructor", env={"GPUCACHE_SECRET": "s"}, directory=str(folder), steps=nothing)])
    for report in (unsigned_env, unsigned_ctor):
        [message] = security_warnings(report)
        assert str(folder) in message and f"writable by {who}" in message
        assert "GPUCACHE_SECRET" in message and f"chmod 700 {folder}" in message  # the fixes
    assert security_warnings(signed_env) == security_warnings(signed_ctor) == []


@pytest.mark.slow
def test_the_default_folder_is_created_private_and_later_processes_trust_it(tmp_path):
    """Under umask 002 (a user's own group, as Debian and Fedora set it up)
    the folders made inside come out group-writable: harmless inside a 0700
    folder, so no warning; once the folder is opened up, a warning."""
    xdg = tmp_path / "xdg"
    env = {"GPUCACHE_DIR": None, "XDG_CACHE_HOME": str(xdg)}
    [report] = run([job("environment")], env, umask=0o002)
    folder = xdg / "gpucache_ext"
    assert [info["location"] for info in report["tier_info"]] == [str(folder)]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert sorted(disk_entries(folder)) == ["cubin", "llvm", "ptx"]
    assert security_warnings(report) == []
    [later] = run([job("environment")], env, umask=0o002)
    assert security_warnings(later) == [] and hit_tiers(later["steps"][0]) == ["disk"] * 3

    folder.chmod(0o755)  # opened up: the group-writable folders inside can be reached now
    [opened] = run([job("environment", steps=[{"do": "entries"}])], env, umask=0o002)
    [message] = security_warnings(opened)
    assert f"{folder / 'v1'} is writable by its group" in message


# -- 7. an argument wins over the environment -----------------------------------
@pytest.mark.slow
def test_an_explicit_secret_wins_over_the_environment(redis_server):
    client = client_for(redis_server)
    env = {"GPUCACHE_REDIS_URL": redis_server.url, "GPUCACHE_SECRET": "from-env"}
    names = {"given": "given", "env": "from-env"}
    ctor, from_env, none = run([
        job("constructor", redis_server.url, {"GPUCACHE_REDIS_PREFIX": "ctor"}, secret="given"),
        job("environment", env={"GPUCACHE_REDIS_PREFIX": "from-env"}, secret="given"),
        # "": no secret, whatever the environment says
        job("constructor", redis_server.url, {"GPUCACHE_REDIS_PREFIX": "none"}, secret="")], env)
    for prefix in ("ctor", "from-env"):
        assert sorted(signer(v, names) for v in stored(client, prefix).values()) == ["given"] * 3, prefix
    assert security_warnings(ctor) == security_warnings(from_env) == []
    assert len(security_warnings(none)) == 1 and stored(client, "none") == {}

    given, from_environment = run([job("environment", env={"GPUCACHE_SECRET": "given",
                                                            "GPUCACHE_REDIS_PREFIX": "ctor"}),
                                   job("environment", env={"GPUCACHE_REDIS_PREFIX": "from-env"})], env)
    assert hit_tiers(given["steps"][0]) == ["shared"] * 3
    assert rejected(from_environment["steps"][0]) == dict.fromkeys(PERSISTENT, {OTHER_SECRET: 1})
