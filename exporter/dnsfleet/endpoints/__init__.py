"""The exporter's HTTP endpoints (/metrics, /probe, /-/reload, /-/ready, /config, the status
page route): request parameters in, an exporter call, a status code and body out."""
