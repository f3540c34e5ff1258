"""Test harness: one managed-process helper (:mod:`tests.harness.process`), the exporter
run as a child process on it (:mod:`tests.harness.exporter`), and one reader of the text
exposition format (:mod:`tests.harness.metrics`)."""
