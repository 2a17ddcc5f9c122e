// The many-candidates mode (--candidates=FILE), for the thousand-elections
// benchmark: 3,000 client-go processes would not fit the machine, so one
// process runs hundreds of candidates, each exactly as the single mode runs
// one (electionConfig), each with its own kubeconfig and client certificate,
// hence its own clientset, transport and connection: the API server sees the
// requests and connections of as many separate processes.
//
// FILE has one candidate a line, tab-separated: namespace, election,
// identity, kubeconfig, state dir (the Lease is leader-<election>). SIGTERM
// cancels every candidate (each publishes "not leader" and releases); the
// process exits once all have returned.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
)

func runMany(file string, stagger time.Duration, userAgent string, t timing) int {
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	var pubs []*publisher
	var mu sync.Mutex
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		mu.Lock()
		f := false
		for _, p := range pubs {
			p.set(&f, nil) // publish "not leader" first
		}
		mu.Unlock()
		cancel()
		<-sigs
		os.Exit(1)
	}()
	var wg sync.WaitGroup
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			fmt.Fprintf(os.Stderr, "%s: expected 5 tab-separated fields: %q\n", file, line)
			return 2
		}
		if ctx.Err() != nil {
			break
		}
		ns, election, identity, kubeconfig, stateDir := f[0], f[1], f[2], f[3], f[4]
		if err := os.MkdirAll(stateDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		pub := &publisher{dir: stateDir, identity: identity, lease: "leader-" + election, ns: ns}
		pub.set(nil, nil)
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		cfg.UserAgent = userAgent
		client := kubernetes.NewForConfigOrDie(cfg)
		mu.Lock()
		pubs = append(pubs, pub)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			// RunOrDie returns when leadership is lost: the single mode's process
			// exits then and its pod restarts it; here the candidate starts again.
			for {
				leaderelection.RunOrDie(ctx, electionConfig(client, pub, t))
				if ctx.Err() != nil {
					return
				}
				fmt.Fprintf(os.Stderr, "bench-clientgo: %s lost its lease; restarting it\n", identity)
			}
		}()
		time.Sleep(stagger)
	}
	wg.Wait()
	return 0
}
