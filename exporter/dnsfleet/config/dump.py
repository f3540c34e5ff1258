"""The effective configuration as YAML, defaults filled in (served on /config).

Derived from the dataclasses (:func:`~dnsfleet.config.checks.dump_section`): every key of
every section, unset optional keys left out, secrets shown as ``<secret>``. The output is
itself a valid configuration that loads to the same :class:`Config`."""

from __future__ import annotations

import yaml

from dnsfleet.config.checks import dump_section
from dnsfleet.config.document import Config


def to_yaml(cfg: Config) -> str:
    """The effective configuration, defaults filled in (served on /config)."""
    return f"# source: {cfg.source}\n" + yaml.safe_dump(dump_section(cfg), sort_keys=False)
