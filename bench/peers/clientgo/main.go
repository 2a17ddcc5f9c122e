// Command clientgo-peer is the client-go reference candidate for the benchmarks.
//
// It runs client-go's tools/leaderelection over a LeaseLock with
// ReleaseOnCancel and the core-client timings (15s/10s/2s by default), and
// reports leadership the way the sidecar does: it rewrites
// <state-dir>/state.json atomically (write, fsync, rename) from the
// callbacks, so the harness reads every implementation the same way.
// SIGTERM/SIGINT cancel the context: client-go then releases the Lease.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

type publisher struct {
	mu       sync.Mutex
	dir      string
	identity string
	lease    string
	ns       string
	leading  bool
	holder   string
}

func (p *publisher) write() {
	now := time.Now().UTC()
	var holder any
	if p.holder != "" {
		holder = p.holder
	}
	state := map[string]any{
		"election":    "main",
		"namespace":   p.ns,
		"lease":       p.lease,
		"identity":    p.identity,
		"is_leader":   p.leading,
		"holder":      holder,
		"valid_until": nil,
		"updated_at":  now.Format("2006-01-02T15:04:05.000000Z"),
	}
	data, _ := json.Marshal(state)
	tmp := filepath.Join(p.dir, ".state.json.tmp")
	f, err := os.Create(tmp)
	if err != nil {
		fmt.Fprintln(os.Stderr, "state file:", err)
		return
	}
	_, _ = f.Write(data)
	_ = f.Sync()
	_ = f.Close()
	_ = os.Rename(tmp, filepath.Join(p.dir, "state.json"))
}

func (p *publisher) set(leading *bool, holder *string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if leading != nil {
		p.leading = *leading
	}
	if holder != nil {
		p.holder = *holder
	}
	p.write()
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	namespace := flag.String("namespace", "default", "namespace of the Lease")
	lease := flag.String("lease", "leader-main", "Lease name")
	identity := flag.String("identity", "", "candidate identity")
	stateDir := flag.String("state-dir", ".", "where state.json is written")
	leaseDuration := flag.Duration("lease-duration", 15*time.Second, "lease duration")
	renewDeadline := flag.Duration("renew-deadline", 10*time.Second, "renew deadline")
	retryPeriod := flag.Duration("retry-period", 2*time.Second, "retry period")
	userAgent := flag.String("user-agent", "bench-clientgo", "HTTP user agent")
	candidates := flag.String("candidates", "", "many candidates in this process (many.go)")
	stagger := flag.Duration("stagger", 20*time.Millisecond, "with --candidates: between starts")
	flag.Parse()
	times := timing{*leaseDuration, *renewDeadline, *retryPeriod}
	if *candidates != "" {
		os.Exit(runMany(*candidates, *stagger, *userAgent, times))
	}

	if err := os.MkdirAll(*stateDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	pub := &publisher{dir: *stateDir, identity: *identity, lease: *lease, ns: *namespace}
	pub.set(nil, nil) // is_leader: false first, like the sidecar

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg.UserAgent = *userAgent
	client := kubernetes.NewForConfigOrDie(cfg)

	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		f := false
		pub.set(&f, nil) // publish "not leader" first
		cancel()
		<-sigs
		os.Exit(1)
	}()

	leaderelection.RunOrDie(ctx, electionConfig(client, pub, times))
}

type timing struct{ lease, renew, retry time.Duration }

// electionConfig is every candidate's elector: a LeaseLock, ReleaseOnCancel,
// the given timings, and callbacks that publish to its state file.
func electionConfig(client kubernetes.Interface, pub *publisher, t timing) leaderelection.LeaderElectionConfig {
	identity := pub.identity
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: pub.lease, Namespace: pub.ns},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	return leaderelection.LeaderElectionConfig{
		Lock:            lock,
		ReleaseOnCancel: true,
		LeaseDuration:   t.lease,
		RenewDeadline:   t.renew,
		RetryPeriod:     t.retry,
		Name:            pub.lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				t := true
				pub.set(&t, &identity)
			},
			OnStoppedLeading: func() {
				f := false
				pub.set(&f, nil)
			},
			OnNewLeader: func(id string) {
				pub.set(nil, &id)
			},
		},
	}
}
