// Told of every change of leadership the moment it happens, without polling (Go, standard library).
//
// Follows the sidecar's Server-Sent Events stream (GET /events, contract §4):
// one `data:` line per change holding the state as JSON, the state at connection
// time first. The stream ends when the sidecar stops; the loop reconnects. This
// prints a line when leadership changes.
//
// Leader-only work must still stop at valid_until if no event comes (a frozen
// sidecar cannot send one).
//
//	go run watch-leader.go
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

type state struct {
	IsLeader     bool   `json:"is_leader"`
	FencingToken *int64 `json:"fencing_token"`
	ValidUntil   string `json:"valid_until"`
}

func main() {
	url := os.Getenv("LEADER_ELECTION_URL")
	if url == "" {
		url = "http://127.0.0.1:4040/leader"
	}
	url = strings.TrimSuffix(url, "/leader") + "/events"
	last := ""
	for {
		follow(url, &last)
		time.Sleep(time.Second)
	}
}

func follow(url string, last *string) {
	resp, err := http.Get(url)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		data, ok := strings.CutPrefix(lines.Text(), "data: ")
		if !ok {
			continue
		}
		var s state
		if json.Unmarshal([]byte(data), &s) != nil {
			continue
		}
		now := "not leading"
		if s.IsLeader && s.FencingToken != nil {
			now = fmt.Sprintf("leading (fencing token %d)", *s.FencingToken)
		}
		if now != *last {
			fmt.Println(now)
			*last = now
		}
	}
}
