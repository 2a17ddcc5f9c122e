"""What the application sees: the state file, the HTTP endpoints, the metrics."""
