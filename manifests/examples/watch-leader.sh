#!/bin/sh
# Told of every change of leadership the moment it happens, without polling:
# follow the sidecar's Server-Sent Events stream (GET /events, contract §4).
# Each change arrives as one `data:` line holding the state as JSON; the first
# is the state at connection time. This prints a line when leadership changes.
#
# The stream ends when the sidecar stops (after its last "not leader" event);
# the loop reconnects. Leader-only work must still stop at `valid_until` if no
# event comes (a frozen sidecar cannot send one): see leader-only-work.sh.
set -u
events="${LEADER_ELECTION_URL:-http://127.0.0.1:4040/leader}"
events="${events%/leader}/events"

trap 'exit 0' TERM INT
while :; do
    last=""
    curl -sN "$events" | while IFS= read -r line; do
        case "$line" in
        data:*'"is_leader":true'*)
            now="leading (fencing token $(printf '%s' "$line" | sed 's/.*"fencing_token":\([0-9]*\).*/\1/'))" ;;
        data:*) now="not leading" ;;
        *) continue ;;
        esac
        [ "$now" != "$last" ] && echo "$now"
        last="$now"
    done
    sleep 1
done
