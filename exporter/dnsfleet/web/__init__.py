"""Serving HTTP: the HTTP/1.1 server and its request parser, the router a handler sees, and
``--web.config.file`` (TLS, basic auth, rate limit) with the guard that enforces it. Knows
nothing of DNS: the exporter's own endpoints live in :mod:`dnsfleet.endpoints`."""
