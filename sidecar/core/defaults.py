"""Defaults and limits every part agrees on: the CLI, the injector, the chart's checks and the core.

One place, so a default the injector writes into a pod is the one the sidecar
would have used, and a limit the CLI enforces is the one admission enforces.
"""

from __future__ import annotations

PROG = "grelmicro-sidecar"

#: Where state.json is written, and where app containers read it.
STATE_DIR = "/var/run/leader-election"
#: The sidecar's HTTP port (``/leader``, ``/status``, ``/healthz``, ``/metrics``).
PORT = 4040

#: contract §3 defaults, in seconds (client-go's core clients use the same).
LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0

#: No duration setting may exceed a day; a Lease claiming longer is read as garbage.
MAX_DURATION = 86400
#: Below this, an API outage turns every candidate into a load generator.
MIN_RETRY_PERIOD = 0.1

#: How long past expiry a Lease must be before a sweep deletes it: by the wall
#: clock (what grelmicro and client-go peers judge) and beyond its duration on
#: the sweeper's monotonic clock (what no skew can fool; contract §5).
SWEEP_MARGIN = 60.0
#: Below this a margin is refused: it must cover the sweeper's own pauses
#: between its look and its delete and the holder's last write in flight.
MIN_SWEEP_MARGIN = 5.0

LOG_LEVELS = ("debug", "info", "warning", "error")

#: ``lock``: how long before ``valid_until`` the command gets SIGTERM (SIGKILL at it);
#: at most a quarter of the renew deadline by default.
KILL_GRACE = 5.0

#: The leader label (contract §4): on the sidecar's own pod while it leads, so a
#: Service can select the leader while every pod stays Ready.
LEADER_LABEL = "leader-election.grelmicro.io/leader"
LEADER_LABEL_VALUE = "true"
