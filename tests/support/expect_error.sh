#!/usr/bin/env bash
# Sourced by the program tests: expect_error <expected text> <program> <args...> runs the program and
# fails the test unless it exits with code 2 (an lwcl::error) and its stderr holds the text. Needs $work.
expect_error() {
  local want=$1
  shift
  set +e
  "$@" > "$work/err.out" 2> "$work/err.txt"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] && grep -q "$want" "$work/err.txt" || {
    echo "$(basename "$0"): expected exit 2 and '$want' from $*, got $rc:" >&2
    cat "$work/err.txt" >&2
    exit 1
  }
}
