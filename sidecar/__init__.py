"""grelmicro-sidecar: Kubernetes leader election over Lease objects, as a sidecar.

Layout, by role (a path tells what a module may import; ``make lint`` checks the
three rules marked * with import-linter, see ``[tool.importlinter]`` in pyproject.toml):

- ``defaults``, ``durations``, ``timing``, ``lease``, ``election``: pure logic, no
  I/O (unit-tested with a fake clock). * They import nothing of the layers below,
  nor h11/kopf/aiohttp/yaml.
- ``kube``: API access (config, the connection with its in-memory TLS, HTTP/1.1
  client, one call path, errors, the Lease store and its watch, the one pod
  label the sidecar writes).
- ``publish``: what the application sees (the typed state, state file, HTTP
  endpoints, metrics, the leader label).
- ``runner``, ``handover``, ``roster``, ``cleanup``, ``sweepduty``, ``held_signals``:
  the driver of the election; the release that names a successor and the roster
  it names from; the sweep, and which sidecar of a namespace does it at exit;
  the signals that arrive before the driver can handle them.
- ``cli``, ``commands``, ``options`` (the settings toolkit: flag, env, default,
  one-line errors), ``settings``, ``logs``: the command line; ``lock`` and
  ``guard``: the ``lock`` command (a command run only while leading; the guard is
  its own process and * imports only the standard library).
- ``injector``: the admission webhook. * Only it imports kopf and aiohttp, and
  only ``cli`` imports it, inside the function that runs ``injector``.
"""

__version__ = "0.1.0"
