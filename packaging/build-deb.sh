#!/usr/bin/env bash
# make deb: build dist/dnsfleet_<version>_all.deb from debian/ with dpkg-buildpackage
# (debhelper, dh-python's pybuild), in a copy of the work tree so the build leaves nothing
# in it. Prints the path of the .deb.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=$work/dnsfleet
mkdir "$src"
# Tracked files and new ones not ignored: what a commit of the work tree would hold.
git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f"; done |
    xargs -0 cp -a --parents -t "$src"
# Debian's own interpreter and tools only: a python3 earlier in PATH (pyenv, a venv) is not
# what the package is built for.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
(cd "$src" && dpkg-checkbuilddeps)
(cd "$src" && dpkg-buildpackage -b -us -uc >"$work/build.log" 2>&1) || {
    tail -50 "$work/build.log" >&2
    exit 1
}
mkdir -p dist
version=$(dpkg-parsechangelog -l debian/changelog -S Version)
deb=dist/dnsfleet_${version}_all.deb
# Atomically: two builds may run at once (make test's two pytest runs).
cp "$work/dnsfleet_${version}_all.deb" "$deb.tmp.$$"
mv -f "$deb.tmp.$$" "$deb"
echo "$deb"
