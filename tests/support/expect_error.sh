#!/usr/bin/env bash
# Sourced by the program tests; both need $work.
#   expect_error <expected text> <program> <args...>: fails the test unless the program exits with code 2
#     (an lwcl::error) and its stderr holds the text.
#   expect_bad_option <expected text> <program> <args...>: fails the test unless the command line is refused
#     (CLI11's non-zero exit, not a crash) with the text on stderr, stated in words: no number of 20 digits
#     or more (a machine bound such as the largest double).

# Runs the command with its output in $work/err.out and $work/err.txt; its exit code in $expect_rc.
expect_run() {
  set +e
  "$@" > "$work/err.out" 2> "$work/err.txt"
  expect_rc=$?
  set -e
}

# Ends the test: what was expected (first argument) from the command (the rest), and what came.
expect_failed() {
  local what=$1
  shift
  echo "$(basename "$0"): expected $what from $*, got $expect_rc:" >&2
  cat "$work/err.txt" >&2
  exit 1
}

expect_error() {
  local want=$1
  shift
  expect_run "$@"
  [ "$expect_rc" -eq 2 ] && grep -q "$want" "$work/err.txt" || expect_failed "exit 2 and '$want'" "$@"
}

expect_bad_option() {
  local want=$1
  shift
  expect_run "$@"
  [ "$expect_rc" -ne 0 ] && [ "$expect_rc" -lt 128 ] && grep -qF -- "$want" "$work/err.txt" &&
    ! grep -qE '[0-9]{20}' "$work/err.txt" || expect_failed "a refused option with '$want'" "$@"
}
