"""--web.config.file: TLS, client certificates and basic auth on the real exporter process,
with real clients (curl and aiohttp) and real certificates (trustme)."""

from __future__ import annotations

import asyncio
import base64
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import bcrypt
import pytest
import trustme
import yaml

from dnsfleet.config import ConfigError
from dnsfleet.web import config as webconfig
from dnsfleet.web import guard as webguard
from tests.harness.exporter import EXPORTER, ExporterProcess, running_exporter
from tests.harness.messages import without_position
from tests.harness.tools import binary

# Cost 4 keeps the suite fast; cost is read from the hash, so this exercises the same code.
ALICE_PW = "correct horse"
ALICE_HASH = bcrypt.hashpw(ALICE_PW.encode(), bcrypt.gensalt(rounds=4)).decode()
# htpasswd -B writes $2y$: accepted as the same algorithm.
BOB_HASH = (
    bcrypt.hashpw(b"battery staple", bcrypt.gensalt(rounds=4)).decode().replace("$2b$", "$2y$", 1)
)

# resolv_conf: [] — the stub collector must never probe this machine's own resolver.
EXPORTER_CONFIG = """
resolv_conf: []
modules:
  recursive: {query_name: ., query_type: NS, timeout: 100ms}
targets: []
"""


@dataclass
class Pki:
    dir: Path
    ca: trustme.CA
    server_cert: Path
    server_key: Path
    ca_file: Path
    client_ca: trustme.CA
    client_ca_file: Path
    client_pem: Path  # key and chain of a client cert the exporter trusts
    stranger_pem: Path  # issued by a CA the exporter does not trust


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.cert_chain_pems[0].write_to_path(str(d / "server.crt"))
    server.private_key_pem.write_to_path(str(d / "server.key"))
    ca.cert_pem.write_to_path(str(d / "ca.crt"))
    client_ca = trustme.CA()
    client_ca.cert_pem.write_to_path(str(d / "client-ca.crt"))
    client = client_ca.issue_cert("prometheus.example.test")
    client.private_key_and_cert_chain_pem.write_to_path(str(d / "client.pem"))
    stranger = trustme.CA().issue_cert("prometheus.example.test")
    stranger.private_key_and_cert_chain_pem.write_to_path(str(d / "stranger.pem"))
    return Pki(
        dir=d,
        ca=ca,
        server_cert=d / "server.crt",
        server_key=d / "server.key",
        ca_file=d / "ca.crt",
        client_ca=client_ca,
        client_ca_file=d / "client-ca.crt",
        client_pem=d / "client.pem",
        stranger_pem=d / "stranger.pem",
    )


def write(tmp: Path, name: str, doc: object) -> Path:
    p = tmp / name
    p.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return p


@pytest.fixture
def exporter_config(tmp_path: Path) -> Path:
    return write(tmp_path, "dnsfleet.yml", EXPORTER_CONFIG)


def curl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary("curl"), "-sS", "--max-time", "10", *args],
        capture_output=True,
        text=True,
        timeout=20,
    )


def curl_status(*args: str) -> str:
    return curl("-o", "/dev/null", "-w", "%{http_code}", *args).stdout


@pytest.fixture
def auth_exporter(tmp_path: Path, exporter_config: Path) -> Iterator[ExporterProcess]:
    wc = write(tmp_path, "web.yml", {"basic_auth_users": {"alice": ALICE_HASH, "bob": BOB_HASH}})
    with running_exporter(
        tmp_path, "--config.file", str(exporter_config), "--web.config.file", str(wc)
    ) as e:
        yield e


# ------------------------------------------------------------------------ basic auth


@pytest.mark.integration
def test_basic_auth_with_curl(auth_exporter: ExporterProcess) -> None:
    url = auth_exporter.url + "/metrics"
    no_creds = curl("-i", url)
    assert no_creds.stdout.startswith("HTTP/1.1 401")
    assert "WWW-Authenticate: Basic" in no_creds.stdout
    assert curl_status("-u", "alice:wrong", url) == "401"
    assert curl_status("-u", f"mallory:{ALICE_PW}", url) == "401"
    assert curl_status("-u", "bob:correct horse", url) == "401"  # alice's password
    ok = curl("-u", f"alice:{ALICE_PW}", url)
    assert ok.returncode == 0
    assert "dnsfleet_scrapes_total 1" in ok.stdout
    assert curl_status("-u", "bob:battery staple", url) == "200"
    # Every endpoint is behind the door, /probe and /-/reload included.
    for path in ("/", "/config", "/-/healthy", "/probe?target=127.0.0.1"):
        assert curl_status(auth_exporter.url + path) == "401", path
    assert curl_status("-X", "POST", auth_exporter.url + "/-/reload") == "401"


@pytest.mark.integration
@pytest.mark.parametrize(
    "header",
    [
        "Basic",
        "Basic !!!notbase64",
        "Basic " + base64.b64encode(b"no-colon").decode(),
        "Bearer " + base64.b64encode(f"alice:{ALICE_PW}".encode()).decode(),
        "Basic " + base64.b64encode(b"\xff\xfe:" + ALICE_PW.encode()).decode(),
        "Basic " + base64.b64encode(b"alice:" + b"x" * 100_000).decode()[:7000],
    ],
)
def test_malformed_authorization_is_401(auth_exporter: ExporterProcess, header: str) -> None:
    async def go() -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as s,
            s.get(auth_exporter.url + "/metrics", headers={"Authorization": header}) as r,
        ):
            return r.status, r.headers.get("WWW-Authenticate", "")

    assert asyncio.run(go()) == (401, "Basic")


@pytest.mark.unit
def test_verifications_are_cached_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    auth = webguard.BasicAuth({"alice": ALICE_HASH.encode()})

    async def go() -> None:
        for _ in range(20):  # a scrape every 15s must not pay bcrypt each time
            assert await auth.check("alice", ALICE_PW.encode())
        assert auth.bcrypt_calls == 1
        assert not await auth.check("alice", b"wrong")
        assert not await auth.check("alice", b"wrong")
        assert auth.bcrypt_calls == 2
        # An unknown user costs a bcrypt too (no user enumeration by timing) and is never
        # let in.
        assert not await auth.check("mallory", ALICE_PW.encode())
        assert auth.bcrypt_calls == 3
        # Many distinct passwords: the cache stays bounded, oldest entries go first.
        monkeypatch.setattr(webguard, "AUTH_CACHE_SIZE", 4)
        for i in range(10):
            assert not await auth.check("alice", f"guess {i}".encode())
        assert len(auth._cache) == 4
        assert await auth.check("alice", ALICE_PW.encode())
        assert auth.bcrypt_calls == 14  # evicted, so verified again

    asyncio.run(go())


@pytest.mark.unit
def test_cache_holds_no_plaintext_password() -> None:
    auth = webguard.BasicAuth({"alice": ALICE_HASH.encode()})
    asyncio.run(auth.check("alice", ALICE_PW.encode()))
    (key,) = auth._cache
    assert ALICE_PW.encode() not in key and len(key) == 32


# ------------------------------------------------------------------------ TLS


@pytest.fixture
def tls_exporter(tmp_path: Path, exporter_config: Path, pki: Pki) -> Iterator[ExporterProcess]:
    wc = write(
        tmp_path,
        "web.yml",
        {
            "tls_server_config": {
                "cert_file": str(pki.server_cert),
                "key_file": str(pki.server_key),
            },
            "http_server_config": {
                "headers": {
                    "X-Content-Type-Options": "nosniff",
                    "Strict-Transport-Security": "max-age=31536000",
                }
            },
            "basic_auth_users": {"alice": ALICE_HASH},
        },
    )
    with running_exporter(
        tmp_path, "--config.file", str(exporter_config), "--web.config.file", str(wc)
    ) as e:
        yield e


@pytest.mark.integration
def test_tls_and_basic_auth_with_curl(tls_exporter: ExporterProcess, pki: Pki) -> None:
    url = tls_exporter.https_url + "/metrics"
    r = curl("-i", "--cacert", str(pki.ca_file), "-u", f"alice:{ALICE_PW}", url)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("HTTP/1.1 200")
    assert "X-Content-Type-Options: nosniff" in r.stdout
    assert "Strict-Transport-Security: max-age=31536000" in r.stdout
    assert "dnsfleet_build_info" in r.stdout
    assert curl_status("--cacert", str(pki.ca_file), url) == "401"
    # An untrusted server certificate is refused by the client (curl exit 60).
    assert curl("-u", f"alice:{ALICE_PW}", url).returncode == 60


@pytest.mark.integration
def test_plain_http_to_tls_listener_fails_cleanly(tls_exporter: ExporterProcess, pki: Pki) -> None:
    for _ in range(3):
        plain = curl("-u", f"alice:{ALICE_PW}", tls_exporter.url + "/metrics")
        assert plain.returncode in (52, 56), plain  # empty reply / connection reset
        assert "dnsfleet" not in plain.stdout

    async def aio() -> None:
        async with aiohttp.ClientSession() as s:
            with pytest.raises(aiohttp.ClientError):
                async with s.get(tls_exporter.url + "/metrics"):
                    pass

    asyncio.run(aio())
    # The listener is unharmed and logged no traceback for the rejected handshakes.
    ok = curl(
        "--cacert",
        str(pki.ca_file),
        "-u",
        f"alice:{ALICE_PW}",
        tls_exporter.https_url + "/-/healthy",
    )
    assert ok.stdout == "OK\n"
    assert tls_exporter.proc.poll() is None
    assert "Traceback" not in tls_exporter.stderr()


@pytest.mark.integration
def test_aiohttp_client_over_tls(tls_exporter: ExporterProcess, pki: Pki) -> None:
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))

    async def go() -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as s,
            s.get(
                tls_exporter.https_url + "/metrics",
                ssl=ctx,
                headers={
                    "Authorization": "Basic "
                    + base64.b64encode(f"alice:{ALICE_PW}".encode()).decode()
                },
            ) as r,
        ):
            return r.status, await r.text()

    status, text = asyncio.run(go())
    assert status == 200 and "dnsfleet_scrapes_total" in text


@pytest.fixture
def mtls_exporter(tmp_path: Path, exporter_config: Path, pki: Pki) -> Iterator[ExporterProcess]:
    wc = write(
        tmp_path,
        "web.yml",
        {
            "tls_server_config": {
                "cert_file": str(pki.server_cert),
                "key_file": str(pki.server_key),
                "client_auth_type": "RequireAndVerifyClientCert",
                "client_ca_file": str(pki.client_ca_file),
                "client_allowed_sans": ["prometheus.example.test"],
                "min_version": "TLS12",
            }
        },
    )
    with running_exporter(
        tmp_path, "--config.file", str(exporter_config), "--web.config.file", str(wc)
    ) as e:
        yield e


@pytest.mark.integration
def test_client_certificates(mtls_exporter: ExporterProcess, pki: Pki) -> None:
    url = mtls_exporter.https_url + "/metrics"
    ca = ("--cacert", str(pki.ca_file))
    assert curl_status(*ca, "--cert", str(pki.client_pem), url) == "200"
    # No client certificate, or one from a CA the exporter does not trust: no handshake.
    assert curl(*ca, url).returncode != 0
    assert curl(*ca, "--cert", str(pki.stranger_pem), url).returncode != 0
    assert mtls_exporter.proc.poll() is None


@pytest.mark.integration
def test_client_allowed_sans(tmp_path: Path, exporter_config: Path, pki: Pki) -> None:
    other = pki.client_ca.issue_cert("grafana.example.test")
    other.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "other.pem"))
    wc = write(
        tmp_path,
        "web.yml",
        {
            "tls_server_config": {
                "cert_file": str(pki.server_cert),
                "key_file": str(pki.server_key),
                "client_auth_type": "RequireAndVerifyClientCert",
                "client_ca_file": str(pki.client_ca_file),
                "client_allowed_sans": ["prometheus.example.test"],
            }
        },
    )
    with running_exporter(
        tmp_path, "--config.file", str(exporter_config), "--web.config.file", str(wc)
    ) as e:
        url = e.https_url + "/metrics"
        ca = ("--cacert", str(pki.ca_file))
        assert curl_status(*ca, "--cert", str(tmp_path / "other.pem"), url) == "403"
        assert curl_status(*ca, "--cert", str(pki.client_pem), url) == "200"


@pytest.mark.integration
def test_min_version_enforced(tmp_path: Path, exporter_config: Path, pki: Pki) -> None:
    wc = write(
        tmp_path,
        "web.yml",
        {
            "tls_server_config": {
                "cert_file": str(pki.server_cert),
                "key_file": str(pki.server_key),
                "min_version": "TLS13",
            }
        },
    )
    with running_exporter(
        tmp_path, "--config.file", str(exporter_config), "--web.config.file", str(wc)
    ) as e:
        url = e.https_url + "/-/healthy"
        ca = ("--cacert", str(pki.ca_file))
        assert curl(*ca, "--tls-max", "1.2", url).returncode == 35  # handshake failure
        assert curl(*ca, "--tlsv1.3", url).stdout == "OK\n"


@pytest.mark.unit
def test_inline_certificate_and_key(tmp_path: Path, pki: Pki) -> None:
    wc = write(
        tmp_path,
        "web.yml",
        {
            "tls_server_config": {
                "cert": pki.server_cert.read_text(),
                "key": pki.server_key.read_text(),
            }
        },
    )
    assert webconfig.load(wc).ssl_context is not None


@pytest.mark.integration
def test_rate_limit(tmp_path: Path, exporter_config: Path) -> None:
    wc = write(tmp_path, "web.yml", {"rate_limit": {"interval": "1m", "burst": 2}})
    with running_exporter(
        tmp_path, "--config.file", str(exporter_config), "--web.config.file", str(wc)
    ) as e:
        codes = [curl_status(e.url + "/-/healthy") for _ in range(4)]
    assert codes == ["200", "200", "429", "429"]


# ------------------------------------------------------------------------ invalid files


def _tls(pki: Pki, **extra: object) -> dict[str, object]:
    return {
        "tls_server_config": {
            "cert_file": str(pki.server_cert),
            "key_file": str(pki.server_key),
            **extra,
        }
    }


INVALID: list[tuple[str, object, str]] = [
    (
        "unknown top-level key",
        {"basic_auth_user": {}},
        "web.yml: basic_auth_user: unknown key (valid keys: basic_auth_users, "
        "http_server_config, rate_limit, tls_server_config)",
    ),
    (
        "plain-text password",
        {"basic_auth_users": {"alice": "hunter2"}},
        "web.yml: basic_auth_users.alice: not a bcrypt hash (generate one with: "
        "htpasswd -nBC 10 \"\" | tr -d ':\\n')",
    ),
    (
        "missing key",
        {"tls_server_config": {"cert_file": "server.crt"}},
        "web.yml: tls_server_config: missing key_file",
    ),
    (
        "header not allowed",
        {"http_server_config": {"headers": {"Server": "x"}}},
        "web.yml: http_server_config.headers.Server: HTTP header 'Server' can not be "
        "configured (configurable: Strict-Transport-Security, X-Content-Type-Options, "
        "X-Frame-Options, X-XSS-Protection, Content-Security-Policy)",
    ),
    (
        "header value",
        {"http_server_config": {"headers": {"X-Frame-Options": "allow"}}},
        "web.yml: http_server_config.headers.X-Frame-Options: invalid value 'allow': "
        "expected one of deny, sameorigin",
    ),
    (
        "rate limit without burst",
        {"rate_limit": {"interval": "1s"}},
        "web.yml: rate_limit.burst: must be at least 1 when interval is set",
    ),
]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("doc", "message"), [(d, m) for _, d, m in INVALID], ids=[i for i, _, _ in INVALID]
)
def test_invalid_web_config(tmp_path: Path, doc: object, message: str) -> None:
    p = write(tmp_path, "web.yml", doc)
    with pytest.raises(ConfigError) as e:
        webconfig.load(p)
    assert without_position(str(e.value), p) == message.replace("web.yml", str(p))


@pytest.mark.unit
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"client_auth_type": "RequireAnyClientCert"},
            "tls_server_config.client_auth_type: RequireAnyClientCert accepts client certificates "
            "without verifying them; not supported, use RequireAndVerifyClientCert (or "
            "VerifyClientCertIfGiven) with client_ca_file",
        ),
        (
            {"client_auth_type": "RequireAndVerifyClientCert"},
            "tls_server_config: client_auth_type RequireAndVerifyClientCert needs client_ca_file",
        ),
        (
            {"client_allowed_sans": ["x"]},
            "tls_server_config.client_allowed_sans: needs client_auth_type "
            "RequireAndVerifyClientCert",
        ),
        (
            {"min_version": "TLS13", "max_version": "TLS12"},
            "tls_server_config: min_version TLS13 is above max_version TLS12",
        ),
        (
            {"min_version": "SSL3"},
            'tls_server_config.min_version: "SSL3" is not one of: TLS10, TLS11, TLS12, TLS13',
        ),
        (
            {"cipher_suites": ["TLS_AES_128_GCM_SHA256"]},
            'tls_server_config.cipher_suites[0]: "TLS_AES_128_GCM_SHA256" is not one of: ',
        ),
        (
            {"curve_preferences": ["X25519", "CurveP256"]},
            "tls_server_config.curve_preferences: Python's ssl module can set one curve only: "
            "list a single curve",
        ),
        (
            {"client_ca_file": "ca.crt"},
            "tls_server_config: client CA configured but client_auth_type is NoClientCert: "
            "client certificates would not be checked",
        ),
    ],
)
def test_invalid_tls(tmp_path: Path, pki: Pki, extra: dict[str, object], message: str) -> None:
    p = write(tmp_path, "web.yml", _tls(pki, **extra))
    with pytest.raises(ConfigError) as e:
        webconfig.load(p)
    assert without_position(str(e.value), p).startswith(f"{p}: {message}")


@pytest.mark.unit
def test_unreadable_certificate_names_the_file(tmp_path: Path, pki: Pki) -> None:
    garbage = write(tmp_path, "garbage.crt", "not a certificate\n")
    p = write(
        tmp_path,
        "web.yml",
        {"tls_server_config": {"cert_file": "garbage.crt", "key_file": str(pki.server_key)}},
    )
    with pytest.raises(ConfigError) as e:
        webconfig.load(p)
    # Relative paths are relative to the web config file, as in the toolkit.
    assert without_position(str(e.value), p).startswith(
        f"{p}: tls_server_config: cannot load certificate and key ({garbage}): "
    )


@pytest.mark.integration
def test_cli_refuses_to_start_on_invalid_web_config(tmp_path: Path, exporter_config: Path) -> None:
    p = write(tmp_path, "web.yml", {"basic_auth_users": {"alice": "plain"}})
    r = subprocess.run(
        [
            *EXPORTER,
            "--config.file",
            str(exporter_config),
            "--web.config.file",
            str(p),
            "--config.check",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 1
    assert r.stderr.startswith(
        f"web configuration invalid: {p}:2:10: basic_auth_users.alice: not a bcrypt hash"
    )


@pytest.mark.integration
def test_empty_web_config_serves_plain_http(tmp_path: Path, exporter_config: Path) -> None:
    p = write(tmp_path, "web.yml", "")
    wc = webconfig.load(p)
    assert wc.tls is None and not wc.basic_auth_users and wc.ssl_context is None
    with running_exporter(
        tmp_path, "--config.file", str(exporter_config), "--web.config.file", str(p)
    ) as e:
        assert curl_status(e.url + "/-/healthy") == "200"


# ------------------------------------------------ hardening: limits, refusals, odd inputs


def _hash(password: bytes, cost: int = 4) -> str:
    return bcrypt.hashpw(password[:72], bcrypt.gensalt(cost)).decode()


@pytest.mark.unit
@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {
                "basic_auth_users": {
                    "u": bcrypt.hashpw(b"x", bcrypt.gensalt(4)).decode().replace("$04$", "$15$")
                }
            },
            "basic_auth_users.u: bcrypt cost 15 is outside 4-14",
        ),
        (
            {"http_server_config": {"headers": {"X-Frame-Options": "deny\r\nSet-Cookie: a=b"}}},
            "invalid value",
        ),
        (
            {
                "tls_server_config": {
                    "cert_file": "c.pem",
                    "key_file": "k.pem",
                    "min_version": "TLS10",
                }
            },
            "tls_server_config.min_version: TLS10 is not supported",
        ),
    ],
)
def test_refused_at_load(tmp_path: Path, doc: dict[str, object], message: str) -> None:
    p = tmp_path / "web.yml"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=message.replace("$", r"\$")):
        webconfig.load(p)


async def _get(port: int, user: str, password: bytes, *, ctx: ssl.SSLContext | None = None) -> int:
    auth = base64.b64encode(user.encode() + b":" + password).decode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    writer.write(
        f"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\n"
        "Connection: close\r\n\r\n".encode()
    )
    data = await reader.read()
    writer.close()
    return int(data.split(b" ", 2)[1])


@pytest.mark.integration
def test_password_rotation_and_long_passwords_without_restart(tmp_path: Path) -> None:
    """The file is re-read when it changes: a rotated password works at once, the old one
    stops working. A password over 72 bytes is compared on its first 72, as Go's
    x/crypto/bcrypt CompareHashAndPassword does (Python's bcrypt 5 would raise)."""
    from dnsfleet.web.routes import Response, Router
    from dnsfleet.web.server import serve

    long_pw = b"p" * 72 + b"-anything-after-72"
    p = tmp_path / "web.yml"
    p.write_text(yaml.safe_dump({"basic_auth_users": {"u": _hash(b"old")}}))

    async def ok(req: object) -> Response:
        return Response.text(200, "ok\n")

    async def go() -> None:
        r = Router()
        r.add("GET", "/", ok)
        live = webguard.install(r, webconfig.load(p))
        srv = await serve(r, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        try:
            assert await _get(port, "u", b"old") == 200
            p.write_text(yaml.safe_dump({"basic_auth_users": {"u": _hash(long_pw)}}))
            assert await _get(port, "u", b"old") == 401
            assert await _get(port, "u", long_pw) == 200
            assert await _get(port, "u", b"p" * 72 + b"-something-else") == 200
            assert await _get(port, "u", b"p" * 71) == 401
            p.write_text("basic_auth_users: [")  # broken: the previous one stays
            assert await _get(port, "u", long_pw) == 200
            assert live.reloads == 1
        finally:
            srv.close()
            await srv.wait_closed()

    asyncio.run(go())


@pytest.mark.integration
def test_tls_certificate_rotation_and_no_log_line_per_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from dnsfleet.web.routes import Response, Router
    from dnsfleet.web.server import serve

    ca = trustme.CA()
    first, second = ca.issue_cert("127.0.0.1"), ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    first.cert_chain_pems[0].write_to_path(cert)
    first.private_key_pem.write_to_path(key)
    p = tmp_path / "web.yml"
    p.write_text(
        yaml.safe_dump(
            {
                "tls_server_config": {"cert_file": str(cert), "key_file": str(key)},
                "basic_auth_users": {"u": _hash(b"pw")},
            }
        )
    )
    client = ssl.create_default_context()
    ca.configure_trust(client)

    async def ok(req: object) -> Response:
        return Response.text(200, "ok\n")

    def serial(der: bytes | None) -> str:
        from cryptography import x509

        assert der is not None
        return hex(x509.load_der_x509_certificate(der).serial_number)

    async def peer_serial(port: int) -> str:
        _, w = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        der = w.get_extra_info("ssl_object").getpeercert(binary_form=True)
        w.close()
        return serial(der)

    async def go() -> None:
        r = Router()
        r.add("GET", "/", ok)
        live = webguard.install(r, webconfig.load(p))
        srv = await serve(r, "127.0.0.1", 0, tls=live)
        port = srv.sockets[0].getsockname()[1]
        try:
            for _ in range(3):
                assert await _get(port, "u", b"pw", ctx=client) == 200
            before = await peer_serial(port)
            second.cert_chain_pems[0].write_to_path(cert)
            second.private_key_pem.write_to_path(key)
            assert await _get(port, "u", b"pw", ctx=client) == 200  # triggers the re-read
            after = await peer_serial(port)
            assert before != after
        finally:
            srv.close()
            await srv.wait_closed()

    with caplog.at_level("DEBUG", logger="asyncio"):
        asyncio.run(go())
    assert not [r for r in caplog.records if "eof_received" in r.getMessage()]
