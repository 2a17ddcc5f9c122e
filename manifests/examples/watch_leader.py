"""Told of every change of leadership the moment it happens, without polling (Python, stdlib only).

A long poll on the sidecar (contract §4): ``GET /leader?wait=60s`` with the
``ETag`` of the last answer in ``If-None-Match`` is held until the state
changes (answered with the new state: 200 leading, 503 not) or the wait ends
(304). No change is missed between two requests: the ETag names the version
this program last saw. This prints a line when leadership changes.

Leader-only work must still stop at ``valid_until`` if no answer comes (a
frozen sidecar cannot send one).
"""

import http.client
import json
import os
import time
from urllib.parse import urlsplit

url = urlsplit(os.environ.get("LEADER_ELECTION_URL", "http://127.0.0.1:4040/leader"))
etag, last = None, None
while True:
    try:
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=70)
        conn.request("GET", url.path + "?wait=60s", headers={"If-None-Match": etag} if etag else {})
        answer = conn.getresponse()
        body = answer.read()
        conn.close()
    except OSError:  # the sidecar is restarting: try again shortly
        etag = None
        time.sleep(1)
        continue
    if answer.status == 304:
        continue  # nothing changed within the wait
    etag = answer.getheader("ETag")
    state = json.loads(body)
    now = f"leading (fencing token {state['fencing_token']})" if state["is_leader"] else "not leading"
    if now != last:
        print(now, flush=True)
        last = now
