"""The node's HTTP side (metrics-port): Prometheus /metrics and the live dashboard."""
