// CoreDNS with only the plugins the tests use (tests/harness/gotools.py builds it): the
// release in go.mod, its own coremain, the directives in the order of its plugin.cfg.
package main

import (
	_ "github.com/coredns/coredns/plugin/acl"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/dnstap"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/file"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/metrics"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
)

func init() {
	dnsserver.Directives = []string{
		"bind", "prometheus", "errors", "log", "dnstap", "acl", "cache", "file", "forward",
	}
}

func main() { coremain.Run() }
