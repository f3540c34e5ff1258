# A demo service for the dnsfleet Consul DNS checks (agent.hcl: DNS 19600, HTTP 19500).
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
