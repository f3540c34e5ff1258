"""dnsfleet: Prometheus exporter for the health of DNS resolver fleets."""

__version__ = "0.2.0"
