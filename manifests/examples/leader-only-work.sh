#!/bin/sh
# Leader-only work, gated on the grelmicro-sidecar: every round, ask the sidecar
# whether this pod leads (`curl -fs localhost:4040/leader` answers 200 only
# while it does, 503 otherwise) and do the work only then. Every pod of the
# workload runs this loop; exactly one does the work at a time.
#
# Settings (env):
#   LEADER_URL  the sidecar's /leader endpoint; default $LEADER_ELECTION_URL
#               (set by the injector), else http://localhost:4040/leader
#   INTERVAL    seconds between rounds (default 10)
#   ROUNDS      stop after this many rounds (default 0: never)
set -u

url="${LEADER_URL:-${LEADER_ELECTION_URL:-http://localhost:4040/leader}}"
interval="${INTERVAL:-10}"
rounds="${ROUNDS:-0}"

do_leader_work() {
    # Replace with the real task. $1 is the fencing token: it grows with every
    # change of leader, so a store that remembers the highest token it has seen
    # can refuse writes from a leader that has since been replaced.
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) leading (fencing token $1): doing the leader-only work"
}

trap 'exit 0' TERM INT
round=0
while [ "$rounds" -eq 0 ] || [ "$round" -lt "$rounds" ]; do
    round=$((round + 1))
    # -f: fail on 503 (not the leader); -s: quiet. Any failure, including a
    # sidecar that is not up yet, means "not the leader".
    if state="$(curl -fs --max-time 2 "$url")"; then
        token="$(printf '%s' "$state" | sed -n 's/.*"fencing_token": *\([0-9][0-9]*\).*/\1/p')"
        do_leader_work "${token:-?}"
    else
        echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) not the leader: skipping"
    fi
    sleep "$interval" &
    wait $!
done
