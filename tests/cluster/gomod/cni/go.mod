// Builds the CNI plugins (bridge, host-local, loopback, portmap) for the test node.
module grelmicro-sidecar/tests/cluster/cni

go 1.26.0

require github.com/containernetworking/plugins v1.9.1
