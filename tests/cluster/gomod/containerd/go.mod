// Builds containerd, its runc shim and ctr for the test node.
module grelmicro-sidecar/tests/cluster/containerd

go 1.26.6

require github.com/containerd/containerd/v2 v2.4.2
