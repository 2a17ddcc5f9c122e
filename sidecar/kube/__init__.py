"""API access: cluster config, a lean HTTP/1.1 client, and the Lease store."""
