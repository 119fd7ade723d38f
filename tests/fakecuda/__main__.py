"""``python -m tests.fakecuda run SCRIPT.py [--cc 9.0[,8.0]] [-- args...]``

Runs SCRIPT against the fake CUDA driver, prints the recorded driver calls as
JSON lines on stdout (one ``{"call": ..., "args": {...}}`` per line), sends
the script's own stdout/stderr to stderr, and exits with the script's status.
``python -m tests.fakecuda build`` prints the directory of the built library.
"""

from __future__ import annotations

import argparse
import sys

from . import CompilerMissing, build, run


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, script_args = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(prog="python -m tests.fakecuda", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("run", help="run a script against the fake driver and print its driver calls")
    rp.add_argument("script")
    rp.add_argument("--cc", default="9.0", help="comma separated compute capabilities, one per device")
    rp.add_argument("--no-trace", action="store_true", help="record nothing (timing runs)")
    sub.add_parser("build", help="build the library and print its directory")
    ns = ap.parse_args(argv)
    try:
        if ns.cmd == "build":
            print(build())
            return 0
        res = run(ns.script, cc=ns.cc, args=script_args, trace=not ns.no_trace, stdout=sys.stderr, stderr=sys.stderr)
    except CompilerMissing as exc:
        print(f"fakecuda: {exc.reason}", file=sys.stderr)
        return 2
    out = sys.stdout
    for line in res.trace_lines:
        out.write(line + "\n")
    out.flush()
    return res.returncode


if __name__ == "__main__":
    sys.exit(main())
