"""dnstap: what real clients got, read from the resolvers' own dnstap streams.

A resolver writes dnstap (protobuf ``dnstap.Dnstap`` messages, https://dnstap.info) over
Frame Streams (farsightsec/fstrm) to a unix socket. dnsfleet listens on that socket in a
process of its own (:mod:`dnsfleet.dnstap.ingest`) so that a flood of events never delays
a probe or a scrape, and the exporter asks that process for its families on every scrape
(:mod:`dnsfleet.dnstap.client`), starting it again when it exits or stops answering.

- :mod:`~dnsfleet.dnstap.framestreams`: the Frame Streams protocol, sans I/O.
- :mod:`~dnsfleet.dnstap.message`: the dnstap protobuf schema and the DNS peeks (rcode,
  question, EDE) read from the wire bytes by :mod:`dnsfleet.dnswire`'s walker.
- :mod:`~dnsfleet.dnstap.aggregate`: counters and histograms bounded in labels and bytes,
  and their families.
- :mod:`~dnsfleet.dnstap.writers`: the writers' connections and the slots they hold.
- :mod:`~dnsfleet.dnstap.protocol`: what the exporter and the ingest process say to each
  other (settings, request, reply: typed, validated when decoded), one socket per request.
"""
