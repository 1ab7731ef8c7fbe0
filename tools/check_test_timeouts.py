#!/usr/bin/env python3
"""Every ctest test of a build tree has a timeout: lists the registered tests (ctest --show-only=json-v1,
every label, slow and cuda included) and fails, naming each, on any test without a TIMEOUT property or with
one that is not a positive number of seconds. ctest's own default is 10^7 s, so a test without one can hang
a CI run until the CI itself is stopped.

    check_test_timeouts.py <build dir> [--ctest PATH]
    check_test_timeouts.py --self-test
"""
import argparse
import json
import subprocess
import sys


def unbounded(listing):
    """(name, why) for every test in a ctest json-v1 listing that has no usable TIMEOUT."""
    bad = []
    for test in listing.get("tests", []):
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        timeout = props.get("TIMEOUT")
        if timeout is None:
            bad.append((test["name"], "no TIMEOUT"))
            continue
        try:
            seconds = float(timeout)
        except (TypeError, ValueError):
            bad.append((test["name"], f"TIMEOUT {timeout!r} is not a number of seconds"))
            continue
        if not seconds > 0:
            bad.append((test["name"], f"TIMEOUT {timeout!r} is not positive (0 means none)"))
    return bad


def self_test():
    def t(name, timeout=None):
        props = [{"name": "LABELS", "value": ["unit"]}]
        if timeout is not None:
            props.append({"name": "TIMEOUT", "value": timeout})
        return {"name": name, "properties": props}

    listing = {"tests": [t("a", 300), t("b"), t("c", 0), t("d", "soon"), t("e", 1.5), {"name": "f"}]}
    got = [n for n, _ in unbounded(listing)]
    assert got == ["b", "c", "d", "f"], got
    assert unbounded({"tests": [t("a", 10)]}) == []
    assert unbounded({}) == []
    print("check_test_timeouts self-test: passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", help="the build tree whose tests are checked")
    ap.add_argument("--ctest", default="ctest")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        self_test()
        return 0
    if not a.build:
        ap.error("give the build tree to check")
    out = subprocess.run([a.ctest, "--test-dir", a.build, "--show-only=json-v1"], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"check_test_timeouts: ctest could not list the tests of {a.build}: {out.stderr.strip()}", file=sys.stderr)
        return 1
    listing = json.loads(out.stdout)
    n = len(listing.get("tests", []))
    if n == 0:
        print(f"check_test_timeouts: {a.build} registers no test (is it a configured build tree?)", file=sys.stderr)
        return 1
    bad = unbounded(listing)
    for name, why in bad:
        print(f"check_test_timeouts: test '{name}': {why}; register it in a directory that calls "
              f"lwcl_bound_tests() or give it TIMEOUT (cmake/lwcl_test_timeouts.cmake)", file=sys.stderr)
    if bad:
        return 1
    longest = max(float({p["name"]: p["value"] for p in t["properties"]}["TIMEOUT"]) for t in listing["tests"])
    print(f"check_test_timeouts: all {n} tests of {a.build} have a timeout (the longest {longest:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
