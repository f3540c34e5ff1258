#!/usr/bin/env bash
# The fresh-machine proof: `make test` in a clean clone of HEAD on a machine from which every
# Debian package the suite installs has been purged, with no pip or uv cache, as a new
# contributor (or CI on a new machine) starts. What stays is the base system: essential
# packages, those of priority required, important or standard, and what a Debian 12
# machine with a Python toolchain has anyway (KEEP: the clone and the downloads use git,
# curl, openssl and ca-certificates; python3, dpkg-dev, gcc and their kin are what build
# tools depend on). Nothing outside the suite's own packages is removed: the script stops when
# apt would take anything else with them.
#
#   tests/packaging/fresh-machine.sh            # show what would be purged, change nothing
#   tests/packaging/fresh-machine.sh --purge    # purge it, then clone and run make test
#
# Root only, and it does remove packages: run it on a machine you can give back (a CI
# runner, a VM, this project's dev machines), never on a desktop you care about.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
keep=" git curl openssl ca-certificates python3 python3-minimal python3-yaml python3-setuptools dpkg-dev gcc publicsuffix "

packages=$(sed -e 's/#.*//' tests/needs.txt | awk 'NF == 2 && $2 != "image" { print $2 }' | sort -u)
purge=()
for pkg in $packages; do
    status=$(dpkg-query -W -f '${db:Status-Status} ${Essential} ${Priority}' "$pkg" 2>/dev/null || true)
    case "$status" in
        installed\ yes\ *|*\ required|*\ important|*\ standard) continue ;;
        installed\ *) ;;
        *) continue ;;
    esac
    case "$keep" in *" $pkg "*) continue ;; esac
    purge+=("$pkg")
done

echo "purge: ${purge[*]:-(nothing installed)}"
if [ ${#purge[@]} != 0 ]; then
    # Whatever apt would take along beyond the list (a package of the machine's that depends
    # on one of them) stops the run: the list is wrong for this machine. A package apt
    # installed only as a dependency (musl-dev for musl-tools) goes with them.
    others=$(apt-get -s purge "${purge[@]}" | awk '/^Purg/ { print $2 }' |
        grep -vxF -f <(printf '%s\n' "${purge[@]}") |
        grep -vxF -f <(apt-mark showauto) || true)
    if [ -n "$others" ]; then
        echo "apt would also remove: $(echo "$others" | tr '\n' ' ')" >&2
        exit 2
    fi
fi
if [ "${1:-}" != "--purge" ]; then
    echo "dry run: pass --purge to remove them (and what only they needed), then run"
    echo "make test in a clean clone"
    exit 0
fi
[ "$(id -u)" = 0 ] || { echo "root only" >&2; exit 2; }

if [ ${#purge[@]} != 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 purge -y -q "${purge[@]}" >/dev/null
    # What was installed only for them (libraries, lintian's perl modules) goes too.
    apt-get -o DPkg::Lock::Timeout=600 autoremove --purge -y -q >/dev/null
fi
# Nothing the suite installs may be left behind by an earlier run.
missing=$(python3 tests/harness/needs.py --debs)
echo "missing before make test: ${missing:-nothing}"
rm -rf "${HOME:?}/.cache/pip" "${HOME:?}/.cache/uv"

work=$(mktemp -d /tmp/dnsfleet-fresh.XXXXXX)
git clone -q "$repo" "$work/dnsfleet"
cd "$work/dnsfleet"
echo "make test in $work/dnsfleet at $(git rev-parse --short HEAD)"
start=$(date +%s)
rc=0
make test || rc=$?
echo "fresh machine: make test exited $rc after $(($(date +%s) - start)) s"
exit "$rc"
