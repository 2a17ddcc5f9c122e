// Builds runc (CGO, seccomp) for the test node.
module grelmicro-sidecar/tests/cluster/runc

go 1.26.0

require github.com/opencontainers/runc v1.5.2
