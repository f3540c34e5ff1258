"""DNSSEC, zones and encrypted transports: zone integrity at the zones' own nameservers,
resolvers validating, Extended DNS Errors, the DoT/DoH handshake and certificates."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash

from dashboards.gen.vocabulary import SEL, Panel, base, query, ts, variables, with_panels

ENCRYPTED = f'{SEL}, reason=~"tls_handshake|certificate|http_status"'


def dnssec_zones() -> dash.Dashboard:
    d = base(
        "dnsfleet-dnssec",
        "dnsfleet / DNSSEC, zones and encrypted transports",
        "Zone integrity at the zones' own nameservers (signature expiry, serials, DS), "
        "resolvers validating DNSSEC and the Extended DNS Errors they send, and the DoT/DoH "
        "handshake and certificates.",
    )
    d = variables(d)
    return with_panels(d, _zones(), _validation(), _encrypted())


def _zones() -> list[Panel]:
    """Signatures, serials and DS of each zone, per nameserver."""
    return [
        ts(
            "Signature expiry per zone",
            "Time left until each zone's SOA and DNSKEY set stops validating (the "
            "latest expiry among the set's valid RRSIGs), per nameserver "
            "(DNSZoneSignaturesExpiring: warning within the zone's margin, page under "
            "a day).",
            "s",
            query(
                f"dnsfleet_zone_rrsig_expiry_timestamp_seconds{{{SEL}}} - time()",
                "{{zone}} {{type}} @ {{nameserver}}",
            ),
        ),
        ts(
            "SOA serial per nameserver",
            "The serial each nameserver serves: lines apart mean a secondary lags.",
            "none",
            query(f"dnsfleet_zone_soa_serial{{{SEL}}}", "{{zone}} @ {{nameserver}}"),
        ),
        ts(
            "Serial drift against refresh",
            "How long the nameservers have disagreed, against the zone's SOA REFRESH "
            "(DNSZoneSerialDrift when drift exceeds it).",
            "s",
            query(f"dnsfleet_zone_serial_inconsistent_seconds{{{SEL}}}", "{{zone}} drift"),
            query(f"dnsfleet_zone_soa_refresh_seconds{{{SEL}}}", "{{zone}} refresh"),
        ),
        ts(
            "DS match and nameservers answering",
            "1 when the parent's DS matches a zone key at every nameserver "
            "(DNSZoneDSMismatch pages at 0), and each nameserver answering.",
            "bool_yes_no",
            query(f"dnsfleet_zone_ds_match{{{SEL}}}", "{{zone}} DS match"),
            query(f"dnsfleet_zone_nameserver_up{{{SEL}}}", "{{zone}} @ {{nameserver}} up"),
            min_val=0,
            max_val=1,
        ),
    ]


def _validation() -> list[Panel]:
    """Resolvers validating, and the Extended DNS Errors they send."""
    return [
        ts(
            "Resolvers validating",
            "AD on the last answer of modules with dnssec set, and resolvers failing "
            "the validation checks (DNSResolverNotValidating).",
            "short",
            query(f"dnsfleet_probe_dnssec_authenticated{{{SEL}}}", "{{target}} {{module}} AD"),
            query(
                f'dnsfleet_probe_failure{{{SEL}, reason=~"not_validated|validation_disabled"}}'
                " == 1",
                "{{target}} {{module}} {{reason}}",
            ),
            min_val=0,
        ),
        ts(
            "Extended DNS Errors per code",
            "Answers carrying each EDE code per second (RFC 8914: 6 DNSSEC Bogus, "
            "7 Signature Expired, 9 DNSKEY Missing, 18 Prohibited, 22 No Reachable "
            "Authority; other: unregistered).",
            "reqps",
            query(
                "sum by (code) (rate(dnsfleet_probe_extended_errors_total"
                f"{{{SEL}}}[$__rate_interval]))",
                "EDE {{code}}",
            ),
            stack=True,
        ),
    ]


def _encrypted() -> list[Panel]:
    """The DoT/DoH handshake, certificates and failures."""
    return [
        ts(
            "TLS handshake share of latency",
            "The part of each DoT/DoH probe's duration spent in the TLS handshake: "
            "what a client pays per fresh connection.",
            "percentunit",
            query(
                f"dnsfleet_probe_tls_handshake_seconds{{{SEL}}} "
                f"/ dnsfleet_probe_duration_seconds{{{SEL}}}",
                "{{target}} {{module}}",
            ),
            min_val=0,
            max_val=1,
        ),
        ts(
            "Certificate expiry",
            "Time left until the earliest certificate of each DoT/DoH chain expires "
            "(DNSResolverCertificateExpiring under 14 days).",
            "s",
            query(
                f"dnsfleet_probe_tls_cert_expiry_timestamp_seconds{{{SEL}}} - time()",
                "{{target}} {{module}}",
            ),
        ),
        ts(
            "Encrypted transport failures",
            "DoT/DoH probes failing per second by reason: tls_handshake, certificate, http_status.",
            "reqps",
            query(
                "sum by (target, module, reason) (rate(dnsfleet_probe_failures_total"
                f"{{{ENCRYPTED}}}[$__rate_interval]))",
                "{{target}} {{module}} {{reason}}",
            ),
            width=24,
        ),
    ]
