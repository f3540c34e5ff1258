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
if [ "$(id -u)" = 0 ] && command -v mmdebstrap >/dev/null; then
    start=$(date +%s)
    "$pytest" -q -p no:cacheprovider -m packaging tests/test_packaging.py >"$log" 2>&1 &
    pk=$!
fi
"$pytest" -m "not packaging" "$@" | tee "$main"
rc=${PIPESTATUS[0]}
pkrc=0
if [ -n "$pk" ]; then
    wait "$pk"
    pkrc=$?
    echo "--- make test-packaging (ran alongside; $(($(date +%s) - start)) s wall)"
    cat "$log"
fi
count() { grep -Eo "[0-9]+ $1" "$2" | tail -1 | cut -d' ' -f1; }
total() { echo $(( $(count "$1" "$main" || true) + 0 + $( [ -n "$pk" ] && count "$1" "$log" || true) + 0 )); }
echo "total: $(total passed) passed, $(total failed) failed, $(total skipped) skipped"
[ "$rc" = 0 ] && [ "$pkrc" = 0 ]
