"""Measured resolver capacity: the state file the exporter reads (:mod:`.model`) and the
``dnsfleet capacity-test`` command that writes it (:mod:`.command`, with its query files in
:mod:`.queries` and the judgement of each resperf run in :mod:`.runs`)."""
