"""grelmicro-sidecar: Kubernetes leader election over Lease objects, as a sidecar.

Packages, from the bottom up; each imports only those below it (``make lint``
checks it: the ``layers`` contract of ``[tool.importlinter]`` in pyproject.toml):

- ``core``: the pure core. The Lease record and the bodies written, the
  election state machine, the timing rules, the published ``State``. No I/O.
- ``kit``: small tools every layer above shares: JSON logs, the settings
  toolkit (flag, env, default, one-line errors), the clocks, asyncio idioms.
- ``kube`` | ``publish`` (independent of each other): the API server (one
  kubeconfig loader, one call path, the Lease store and its watch), and what
  the application sees (state file, change notifications, HTTP endpoints).
- ``driver``: the elector (the loop, the watch, the watchdog) and the
  observers that react to it from outside (state file and HTTP, metrics, leader
  label, Events, logs, hand-off and roster, sweep duty, ``lock``).
- ``injector``: the admission webhook; the only package that imports kopf and
  aiohttp.
- ``commands``: the command line; the only place that builds and wires the
  objects. ``run`` never loads the injector (``cli`` imports it inside the
  function that runs ``injector``).
"""

__version__ = "0.1.0"
