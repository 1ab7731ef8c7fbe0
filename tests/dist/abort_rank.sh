#!/usr/bin/env bash
# A failing rank ends the MPI job within seconds (tests/dist/abort_rank.cpp): for each way a rank can
# fail (the error caught and mpi_session::abort called; the error unwinding out of the session), the job
# must end non-zero, well before mpirun's own --timeout, with the failing rank's message on stderr; and
# the control run with no failure must finish with exit 0.
#   abort_rank.sh <mpiexec> <abort_rank program> <work dir>
set -uo pipefail
mpiexec=$1 prog=$2 work=$3
mkdir -p "$work"
limit=20  # seconds a failing job may take to end (it takes about 1 s); mpirun's --timeout is 60
run() {  # run <mode>: sets rc and secs; stderr in $work/<mode>.err
  local start=$SECONDS
  timeout 90 "$mpiexec" --allow-run-as-root --oversubscribe --mca btl self,vader --timeout 60 -np 2 "$prog" "$1" \
    > "$work/$1.out" 2> "$work/$1.err" < /dev/null
  rc=$?
  secs=$((SECONDS - start))
}
fail=0
expect_abort() {  # expect_abort <mode> <text the error output must hold>
  run "$1"
  if [ "$rc" -eq 0 ] || [ "$secs" -ge "$limit" ] || ! grep -q "$2" "$work/$1.err"; then
    echo "abort_rank.sh: mode $1: expected a non-zero exit within $limit s with '$2' on stderr;" \
         "got exit $rc after $secs s. stderr:" >&2
    cat "$work/$1.err" >&2
    fail=1
  else
    echo "abort_rank.sh: mode $1: the job ended with exit $rc after $secs s, the error printed"
  fi
}
expect_abort caught "abort_rank: rank 1: abort_rank: rank 1 failed on purpose"
expect_abort unwound "rank 1 is unwinding an exception out of its MPI session"
run clean
if [ "$rc" -ne 0 ] || ! grep -q "4 allreduces done, v\[0\] = 16" "$work/clean.out"; then
  echo "abort_rank.sh: mode clean: expected exit 0 and '4 allreduces done, v[0] = 16', got exit $rc:" >&2
  cat "$work/clean.out" "$work/clean.err" >&2
  fail=1
else
  echo "abort_rank.sh: mode clean: finished with exit 0 after $secs s"
fi
exit $fail
