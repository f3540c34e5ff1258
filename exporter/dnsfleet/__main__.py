import sys

from dnsfleet.cli import exporter_main

sys.exit(exporter_main())
