"""grelmicro-sidecar: Kubernetes leader election over Lease objects, as a sidecar.

Layout, by role (a path tells what a module may import):

- ``durations``, ``lease``, ``election``: pure logic, no I/O (unit-tested with a fake clock).
- ``kube``: API access (config, HTTP/1.1 client, the Lease store) behind one small interface.
- ``publish``: what the application sees (state file, HTTP endpoints, metrics).
- ``runner``, ``shutdown``, ``cleanup``: the process that drives the election.
- ``cli``, ``settings``, ``logs``: the command line.
- ``injector``: the admission webhook (kopf); never imported by ``run``.
"""

__version__ = "0.1.0"
