# The demo stack's Consul agent: one server, bootstrapped alone, every listener on loopback
# and on ports apart from a real agent's defaults (8300-8302, 8500, 8600) so the demo can
# run beside one. Not -dev: -dev serves without persistence and, as the demo did with
# -client=0.0.0.0, exposed its open API on every address of the host.
datacenter = "demo"
node_name  = "demo"
bind_addr   = "127.0.0.1"
client_addr = "127.0.0.1"
ports {
  http     = 19500
  dns      = 19600
  server   = 19300
  serf_lan = 19301
  serf_wan = -1
  grpc     = -1
  grpc_tls = -1
}
ui_config {
  enabled = false
}
