#!/usr/bin/env bash
# make test: pytest, with the packaging tests (tests/test_packaging.py: mmdebstrap chroots,
# mostly waiting on the Debian mirror) running alongside in a second pytest so they add
# little wall time. Usage: alongside.sh PYTEST [ARGS...]. Prints the packaging run's
# output after the main one, then one line with both runs' totals.
set -uo pipefail
pytest=$1
shift
log=$(mktemp)
main=$(mktemp)
trap 'rm -f "$log" "$main"' EXIT
pk=
# Only for the whole suite: `make test ARGS=tests/test_x.py` runs what it names.
if [ "$*" = "-q" ] && [ "$(id -u)" = 0 ] && command -v mmdebstrap >/dev/null; then
    start=$(date +%s)
    # At the lowest CPU priority and the lowest best-effort I/O priority (not the idle
    # class, which a busy disk starves): it mostly waits on the mirror, and the main run
    # holds tests that budget their time from what the machine delivers.
    nice -n 19 ionice -c 2 -n 7 \
        "$pytest" -q -s -p no:cacheprovider -m packaging tests/test_packaging.py >"$log" 2>&1 &
    pk=$!
fi
# Three pytest processes: most tests wait on a daemon, a socket or a timer, not on the CPU
# (7m50s against 15m23s in one process, on the same busy 2-core machine). TEST_WORKERS=0
# runs them in one. --dist loadfile: each module runs whole, in order, in one process
# (tests/test_fullstack.py's scenarios feed the checks after them, on fixed loopback
# addresses). Not loadgroup: pytest-xdist 3.8 groups by rewriting item._nodeid, which
# pytest 9 no longer reads, so an xdist_group mark silently groups nothing.
"$pytest" -m "not packaging" -n "${TEST_WORKERS:-3}" --dist loadfile "$@" | tee "$main"
rc=${PIPESTATUS[0]}
pkrc=0
if [ -n "$pk" ]; then
    wait "$pk"
    pkrc=$?
    echo "--- make test-packaging (ran alongside; $(($(date +%s) - start)) s wall)"
    cat "$log"
fi
# pytest's last line: "818 passed, 2 skipped in 461.20s" (or "..., 1 error", "2 errors").
count() { tail -1 "$2" | grep -Eo "[0-9]+ $1" | cut -d' ' -f1; }
total() {
    local a b=
    a=$(count "$1" "$main")
    if [ -n "$pk" ]; then b=$(count "$1" "$log"); fi
    echo $((${a:-0} + ${b:-0}))
}
echo "total: $(total passed) passed, $(total failed) failed, $(total error) errors," \
    "$(total skipped) skipped"
[ "$rc" = 0 ] && [ "$pkrc" = 0 ]
