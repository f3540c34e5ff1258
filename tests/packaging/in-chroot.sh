#!/bin/sh
# Run inside a minimal Debian chroot (mmdebstrap customize hook) by tests/test_packaging.py.
# Usage: in-chroot.sh NEW_DEB [OLD_DEB]. Writes what the test asserts on under /tmp/out.
# Every daemon listens on 127.0.0.1; nothing but apt (the Debian mirror) leaves the host.
set -eu
new=$1
old=${2:-}
out=/tmp/out
mkdir -p "$out"
# Each command, for the test's failure message: where it stopped.
exec 2>"$out/trace.log"
set -x
export DEBIAN_FRONTEND=noninteractive
apt="apt-get -o APT::Keep-Downloaded-Packages=false -y -q --no-install-recommends"

# No maintainer script starts a daemon here (unbound's would listen on port 53).
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod 755 /usr/sbin/policy-rc.d

# The files of the system, without what apt and dpkg keep about themselves.
snapshot() {
    find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp \
        -o -path /var/cache -o -path /var/log -o -path /var/lib/apt -o -path /var/lib/dpkg \) \
        -prune -o -print | sort > "$out/$1"
}

# The dependencies first (apt resolves the package's own Depends, and its Recommends, which
# apt installs with it by default), and what the run needs. A Recommends the release does
# not have (Debian 12 has no python3-isal) apt passes over: so does this, and says which.
$apt satisfy "$(dpkg-deb -f "$new" Depends)" > "$out/deps.log" 2>&1
: > "$out/recommends-missing"
dpkg-deb -f "$new" Recommends | tr ',' '\n' | while read -r rec; do
    [ -n "$rec" ] || continue
    $apt satisfy "$rec" >> "$out/deps.log" 2>&1 || echo "$rec" >> "$out/recommends-missing"
done
$apt install unbound > "$out/unbound-install.log" 2>&1
snapshot files-before

# A port free for TCP and UDP on 127.0.0.1 now, picked when it is used: the chroot shares
# the host's network, where other tests run at the same time.
free_port() {
    python3 -c '
import socket
while True:
    t = socket.socket()
    t.bind(("127.0.0.1", 0))
    port = t.getsockname()[1]
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        u.close()
        t.close()
    print(port)
    break
'
}
UNBOUND_PORT=$(free_port)
CONTROL_PORT=$(free_port)
HTTP_PORT=$(free_port)

# Only loopback from here on: the packaged default config probes /etc/resolv.conf.
rm -f /etc/resolv.conf
printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' > /etc/resolv.conf

cat > /tmp/unbound.conf <<CONF
server:
  interface: 127.0.0.1
  port: $UNBOUND_PORT
  do-daemonize: no
  username: ""
  chroot: ""
  pidfile: ""
  use-syslog: no
  logfile: /tmp/unbound.log
  module-config: "iterator"
  extended-statistics: yes
  local-zone: "local.test." static
  local-data: "a.local.test. 300 IN A 192.0.2.1"
remote-control:
  control-enable: yes
  control-interface: 127.0.0.1
  control-port: $CONTROL_PORT
  control-use-cert: no
CONF
# Whatever this script started ends with it, also when a step fails (the exporter is
# dropped from the list once it has been stopped and waited for: its pid may be reused).
pids=
exporter=
trap 'kill $pids $exporter 2>/dev/null || true' EXIT
unbound -d -c /tmp/unbound.conf > /tmp/unbound.stderr 2>&1 &
pids="$pids $!"
mkdir -p /tmp/www
cp /tmp/coredns-documented.metrics.txt /tmp/www/metrics
(cd /tmp/www && exec python3 -m http.server --bind 127.0.0.1 "$HTTP_PORT") > /tmp/http.log 2>&1 &
pids="$pids $!"

# bcrypt of "s3cret" (cost 4: the test's own credential).
cat > /tmp/web.yml <<'CONF'
basic_auth_users:
  prom: $2b$04$tk97DSRQhVUkpjA9BwRO.OpP/sJUTDcGwUCy5BRmoiqokJE2o4i/.
CONF
cat > /tmp/run.yml <<CONF
modules:
  m: {query_name: a.local.test, query_type: A, timeout: 2s}
targets:
  - address: 127.0.0.1:$UNBOUND_PORT
    module: m
    labels: {site: lab}
    stats: {type: unbound, control: "tcp://127.0.0.1:$CONTROL_PORT"}
  - address: 127.0.0.2:$UNBOUND_PORT
    module: m
    labels: {site: lab}
    stats: {type: coredns, url: "http://127.0.0.1:$HTTP_PORT/metrics"}
resolv_conf: [/etc/resolv.conf]
CONF
cat > /tmp/re2.yml <<CONF
modules:
  m: {query_name: a.local.test, fail_if_matches: ["192\\\\.0\\\\.2\\\\.9"]}
targets:
  - {address: 127.0.0.1:$UNBOUND_PORT, module: m}
CONF
cat > /tmp/dnstap.yml <<CONF
dnstap: {socket: /tmp/dnstap.sock}
CONF
chmod 644 /tmp/web.yml /tmp/run.yml

# install, run, remove, purge: $1 names the round.
round() {
    r=$1
    getent passwd dnsfleet > "$out/$r.passwd"
    stat -c "%U:%G %a" /var/lib/dnsfleet > "$out/$r.statedir"
    dpkg-query -W -f='${Version}' dnsfleet > "$out/$r.version"
    dnsfleet-exporter --version > "$out/$r.exporter-version" 2>&1
    dnsfleet --version > "$out/$r.cli-version" 2>&1
    dnsfleet-exporter --config.file=/etc/dnsfleet/dnsfleet.yml --config.check \
        > "$out/$r.config-check" 2>&1 || echo "rc=$?" >> "$out/$r.config-check"
    dnsfleet-exporter --config.file=/tmp/re2.yml --config.check \
        > "$out/$r.re2-check" 2>&1 || echo "rc=$?" >> "$out/$r.re2-check"
    # dnstap with Debian's python3-protobuf (the Recommends): the section loads, and a
    # frame decodes with the package's schema.
    dnsfleet-exporter --config.file=/tmp/dnstap.yml --config.check \
        > "$out/$r.dnstap-check" 2>&1 || echo "rc=$?" >> "$out/$r.dnstap-check"
    python3 - > "$out/$r.dnstap-decode" 2>&1 <<'PY' || echo "rc=$?" >> "$out/$r.dnstap-decode"
from dnsfleet.dnstap.message import Dnstap, parse_frame

d = Dnstap(type=1)
d.message.type = 6
d.message.response_message = bytes(12)
print(parse_frame(d.SerializeToString()).message.type)
PY
    # /metrics gzip: ISA-L's deflater where python3-isal is installed, zlib elsewhere.
    python3 -c 'from dnsfleet import exposition; print(exposition.gzip_compressor.__name__)' \
        > "$out/$r.deflater" 2>&1 || echo "rc=$?" >> "$out/$r.deflater"
    unit=$(dpkg -L dnsfleet | grep '/dnsfleet-exporter.service$')
    echo "$unit" > "$out/$r.unit-path"
    systemd-analyze verify "$unit" > "$out/$r.verify" 2>&1 || echo "rc=$?" >> "$out/$r.verify"
    systemd-analyze security --offline=true --no-pager "$unit" > "$out/$r.security" 2>&1 ||
        echo "rc=$?" >> "$out/$r.security"
    # The exporter as its user; again on another port if a test took this one meanwhile.
    for attempt in 1 2 3 4 5; do
        port=$(free_port)
        setpriv --reuid=dnsfleet --regid=dnsfleet --clear-groups \
            dnsfleet-exporter --config.file=/tmp/run.yml --web.config.file=/tmp/web.yml \
            --web.listen-address="127.0.0.1:$port" --log.format=json \
            > "$out/$r.exporter.log" 2>&1 &
        pid=$!
        exporter=$pid
        python3 - "$port" "$pid" > "$out/$r.scrape" 2>&1 <<'PY' && break
import base64, sys, time, urllib.error, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}"
auth = {"Authorization": "Basic " + base64.b64encode(b"prom:s3cret").decode()}


def exited(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


for _ in range(300):
    if exited(sys.argv[2]):
        sys.exit(3)
    try:
        urllib.request.urlopen(url + "/-/healthy", timeout=2)
        break
    except urllib.error.HTTPError:
        break
    except OSError:
        time.sleep(0.1)
try:
    urllib.request.urlopen(url + "/metrics", timeout=10)
    print("unauthenticated: 200")
except urllib.error.HTTPError as e:
    print(f"unauthenticated: {e.code}")
req = urllib.request.Request(url + "/metrics", headers=auth)
print(urllib.request.urlopen(req, timeout=30).read().decode())
PY
        kill "$pid" 2>/dev/null || true
        wait "$pid" || true
        exporter=
        echo "attempt $attempt failed" >> "$out/$r.exporter-attempts"
    done
    python3 - "$port" > "$out/$r.gzip-scrape" 2>&1 <<'PY' || echo "rc=$?" >> "$out/$r.gzip-scrape"
import base64, sys, urllib.request, zlib
auth = "Basic " + base64.b64encode(b"prom:s3cret").decode()
req = urllib.request.Request(
    f"http://127.0.0.1:{sys.argv[1]}/metrics",
    headers={"Authorization": auth, "Accept-Encoding": "gzip"},
)
with urllib.request.urlopen(req, timeout=30) as resp:
    print(resp.headers["Content-Encoding"])
    d = zlib.decompressobj(31)
    body = d.decompress(resp.read())
print(d.eof and not d.unused_data, body.count(b"\ndnsfleet_probe_success{"))
PY
    ps -o user= -p "$pid" > "$out/$r.user" || true
    kill "$pid"
    wait "$pid" || true
    exporter=
    $apt remove dnsfleet > "$out/$r.remove.log" 2>&1
    test -f /etc/dnsfleet/dnsfleet.yml && echo kept > "$out/$r.conffile-after-remove"
    test -e /usr/lib/python3/dist-packages/dnsfleet && echo left > "$out/$r.code-after-remove"
    $apt purge dnsfleet > "$out/$r.purge.log" 2>&1
    test -e /etc/dnsfleet || echo gone > "$out/$r.conffile-after-purge"
    snapshot "files-after-$r"
}

apt-get install -y -q "$new" > "$out/fresh.install.log" 2>&1
round fresh

if [ -n "$old" ]; then
    apt-get install -y -q "$old" > "$out/old.install.log" 2>&1
    # As root, the way 0.1.0 ran: Python writes bytecode next to its private copies.
    dnsfleet-exporter --config.file=/etc/dnsfleet/dnsfleet.yml --config.check \
        > "$out/old.config-check" 2>&1 || true
    find /usr/lib/dnsfleet -name '*.pyc' | wc -l > "$out/old.pyc-count"
    apt-get install -y -q "$new" > "$out/upgrade.install.log" 2>&1
    test -e /usr/lib/dnsfleet && find /usr/lib/dnsfleet > "$out/upgrade.leftover"
    round upgrade
fi

