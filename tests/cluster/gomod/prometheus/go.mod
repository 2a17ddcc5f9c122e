// Builds Prometheus and promtool for the alerting and dashboard tests.
module grelmicro-sidecar/tests/cluster/prometheus

go 1.26.7

require github.com/prometheus/prometheus v0.316.0 // indirect
