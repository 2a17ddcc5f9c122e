// Builds CoreDNS for the test node's cluster DNS.
module grelmicro-sidecar/tests/cluster/coredns

go 1.26.0

require github.com/coredns/coredns v1.14.3
