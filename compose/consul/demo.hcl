# A demo service for the dnsfleet Consul DNS checks (dev agent: DNS 8600, HTTP 8500).
services {
  name = "web"
  port = 8080
  address = "127.0.0.10"
  check {
    name     = "always passing"
    ttl      = "87600h"
    status   = "passing"
  }
}
