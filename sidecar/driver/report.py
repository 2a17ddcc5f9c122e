"""The election's log: what happened, which API errors matter and how often, and the clock's drift.

One JSON line per election event. API errors follow one policy: a 403 is
logged once per verb with the RBAC fix, a 401 once with what to check, a
create that finds no namespace once with the fix, anything else once per
status as "retrying with backoff"; a successful write re-arms them all, so an
error that comes back after a recovery is logged again. A lost watch is one
warning until it works again. The clock alarm fires once when this node's
clock is certainly off from the API server's by more than contract §2
tolerates (``lease_duration - renew_deadline``), and is re-armed when the
clock comes back within half of that.
"""

from __future__ import annotations

from typing import Any

from ..core.election import Event
from ..core.timing import Timing
from ..kit.logs import Logger
from ..kube.errors import RBAC_FIX, Forbidden, NotFound, Unauthorized
from ..kube.skew import Offset
from .observer import Call, Observer, View
from .shardboard import MOVE
from .transfer import REASON as TRANSFER

#: Step-downs that were asked for (a transfer, a shard's move): told as info, not warnings.
PLANNED = (TRANSFER, MOVE)

ROLLED_BACK = (
    "the API server's store went back in time (etcd restored from a backup?); "
    "nobody may claim for one lease duration"
)
UNAUTHORIZED = (
    "the API server rejected our credentials (401): the token is expired or invalid; "
    "check the ServiceAccount token mount or the kubeconfig"
)


class LogReport(Observer):
    def __init__(self, log: Logger, lease: str, namespace: str, timing: Timing, offset: Offset):
        self.log, self.lease, self.namespace, self.offset = log, lease, namespace, offset
        self.tolerated = timing.lease_duration - timing.renew_deadline

    def on_event(self, event: Event, view: View) -> None:
        log, lease, kind, detail = self.log, self.lease, event.kind, event.detail
        if kind == "leading":
            log.info("leading", lease=lease, fencing_token=event.fencing_token)
        elif kind == "stepped_down" and detail != "shutting down":
            planned = detail.startswith(PLANNED)  # asked for: nothing to look into
            (log.info if planned else log.warning)("stepped down", lease=lease, reason=detail)
        elif kind == "holder":
            log.info("holder changed", lease=lease, holder=detail or None)
        elif kind == "rolled_back":
            fix = "restore etcd with --bump-revision, or fencing tokens can go back"
            log.warning(ROLLED_BACK, lease=lease, detail=detail, fix=fix)
        elif kind == "problem":
            msg = "lease has an unusable field; treating it conservatively"
            log.warning(msg, lease=lease, problem=detail)

    async def before_release(self) -> None:
        self.log.info("published not-leader", lease=self.lease)

    def on_call(self, call: Call) -> None:
        self._check_clock()
        err = call.error
        if err is None:
            # A read that works says nothing of the write a 403 refused: only a write re-arms.
            if call.kind != "read":
                self.log.forget_prefix("watch" if call.kind == "watch" else "api")
            return
        if call.kind == "watch":
            msg = "watch lost; reconnecting with backoff"
            self.log.once("watch", "warning", msg, error=str(err), retry_in=round(call.retry_in, 2))
        fields: dict[str, Any] = {"detail": str(err)}
        if isinstance(err, Forbidden):
            key, level = f"api:403:{err.verb}", "error"
            msg = f"forbidden: cannot {err.verb} leases in namespace {self.namespace}; {RBAC_FIX}"
            fields = {"verb": err.verb, "resource": "leases.coordination.k8s.io", **fields}
        elif isinstance(err, Unauthorized):
            key, level, msg = "api:401", "error", UNAUTHORIZED
        elif isinstance(err, NotFound) and call.kind == "create":
            key, level = "api:404:namespace", "error"
            msg = f"namespace {self.namespace} does not exist; create it or pass --namespace"
        else:
            key, level, fields = f"api:{err.status}", "warning", {"error": str(err)}
            msg = "API request failed; retrying with backoff"
        self.log.once(key, level, msg, **fields)

    def _check_clock(self) -> None:
        offset = self.offset()
        if offset is not None and offset.beyond(self.tolerated):
            self.log.once(
                "clock-skew",
                "warning",
                "this node's clock is off from the API server's by more than the contract tolerates",
                skew_seconds=round(offset.estimate, 1),
                tolerated_seconds=self.tolerated,
                fix="sync the node's clock (NTP); grelmicro peers and valid_until readers use wall clocks",
            )
        elif offset is not None and not offset.beyond(self.tolerated / 2):
            self.log.forget("clock-skew")
