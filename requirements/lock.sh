#!/usr/bin/env bash
# make lock: resolve what `make run`, `make test` and `make bench` install into exact versions
# with the hashes of every file the registry serves for them (any platform), from
# pyproject.toml's ranges. Writes requirements/{build,run,test,bench}.txt; review the diff,
# run `make test`, commit. Usage: lock.sh UV (the uv binary of the test venv).
set -euo pipefail
uv=$1
cd "$(dirname "$0")/.."
# The inputs' digest: tests/test_lock.py recomputes it and says the lock is stale when
# pyproject.toml's dependencies or a requirements/*.in file changed since.
digest=$(python3 requirements/lockinputs.py)
compile() {
    local out=$1
    shift
    "$uv" pip compile --quiet --generate-hashes --universal --python-version 3.11 \
        --no-header "$@" -o "$out.tmp" >/dev/null
    { echo "# make lock wrote this file (requirements/lock.sh); inputs: $digest"; cat "$out.tmp"; } >"$out"
    rm -f "$out.tmp"
}
compile requirements/build.txt requirements/build.in
compile requirements/run.txt pyproject.toml --extra re2 --extra dnstap
# The test set holds every runtime pin as it is: the suite tests what `make run` installs.
compile requirements/test.txt pyproject.toml --extra re2 --extra dnstap --extra test \
    --constraint requirements/run.txt
compile requirements/bench.txt requirements/bench.in
