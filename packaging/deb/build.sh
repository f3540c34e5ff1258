#!/usr/bin/env bash
# Build dist/dnsfleet_<version>_<arch>.deb with dpkg-deb (make deb). The package carries
# dnsfleet and its Python dependencies in /usr/lib/dnsfleet/site-packages, installed with
# the pip of PYTHON (its ABI must be Debian's python3: the compiled dependencies, aiohttp,
# bcrypt, google-re2, are built for it), a systemd unit, a dedicated user made at install,
# and its configuration in /etc/dnsfleet.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-.venv/bin/python}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
arch=$(dpkg --print-architecture)
pyver=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$($PYTHON -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != "$pyver" ]; then
    echo "build.sh: $PYTHON is not Python $pyver (Debian's python3)" >&2
    exit 1
fi
out=dist/dnsfleet_${version}_${arch}.deb
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
here=packaging/deb

install -d "$root/DEBIAN" "$root/usr/bin" "$root/usr/lib/dnsfleet" \
    "$root/etc/dnsfleet" "$root/etc/default" "$root/lib/systemd/system" \
    "$root/usr/share/doc/dnsfleet"
$PYTHON -m pip install -q --no-compile --target "$root/usr/lib/dnsfleet/site-packages" .
rm -rf "$root/usr/lib/dnsfleet/site-packages/bin"
for pair in dnsfleet-exporter:exporter_main dnsfleet:main; do
    sed "s/ENTRY/${pair#*:}/g" "$here/wrapper" > "$root/usr/bin/${pair%%:*}"
    chmod 755 "$root/usr/bin/${pair%%:*}"
done
install -m 0644 "$here/dnsfleet.yml" "$root/etc/dnsfleet/dnsfleet.yml"
install -m 0644 "$here/default" "$root/etc/default/dnsfleet-exporter"
install -m 0644 "$here/dnsfleet-exporter.service" "$root/lib/systemd/system/"
install -m 0644 README.md "$root/usr/share/doc/dnsfleet/README.md"
gzip -9n -c docs/capacity.md > "$root/usr/share/doc/dnsfleet/capacity.md.gz"
install -m 0755 "$here/postinst" "$here/prerm" "$here/postrm" "$root/DEBIAN/"
printf '/etc/dnsfleet/dnsfleet.yml\n/etc/default/dnsfleet-exporter\n' > "$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: dnsfleet
Version: $version
Architecture: $arch
Maintainer: dnsfleet developers <dnsfleet@example.org>
Installed-Size: $size
Depends: python3 (>= $pyver), python3 (<< ${pyver%.*}.$(( ${pyver#*.} + 1 ))), adduser
Suggests: dnsperf
Section: net
Priority: optional
Homepage: https://github.com/dnsfleet/dnsfleet
Description: Prometheus exporter for the health of DNS resolver fleets
 Probes resolvers over UDP and TCP (latency, rcode, failure reason), models what a
 client's stub resolver suffers when a nameserver fails, detects resolver restarts and
 cache flushes, reads unbound, BIND, PowerDNS, dnsdist, Knot Resolver and CoreDNS
 statistics, probes Consul DNS, and collects the host facts that decide DNS latency
 (bonding, NIC queue interrupts, CPU wake-up latency).
CONTROL
mkdir -p dist
dpkg-deb --root-owner-group -Zxz --build "$root" "$out" >/dev/null
echo "$out"
