package cni_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

// TestCNIBurstSurvivesAgentRestart runs 200 CNI operations (130 ADDs, 70
// DELs) from four runtime threads through libcni and the bridge plugin,
// and restarts the agent in the middle. Calls that hit the restart get
// "try again later" (code 11) and are retried, as a kubelet would. In the
// end the agent holds exactly the live pods' allocations — nothing lost,
// nothing leaked — and no address is held twice.
func TestCNIBurstSurvivesAgentRestart(t *testing.T) {
	needRoot(t)
	bin := pluginDir(t)
	dir := t.TempDir()
	const workers, pods, dels = 4, 130, 70
	n := newNode(t, workers)
	cfg := libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(dir, "cache"), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ag := startAgent(t, dir, pools())
	var agMu sync.Mutex
	defer func() { agMu.Lock(); ag.stop(); agMu.Unlock() }()
	list := bridgeList(t, ag.sock, "mbr1")

	paths := make([]string, pods)
	for i := range pods {
		paths[i] = n.newPod(fmt.Sprintf("b%d", i))
	}
	var done, retries atomic.Int32
	restarted := make(chan struct{})
	go func() { // restart the agent once half of the operations are done
		defer close(restarted)
		for done.Load() < 100 {
			time.Sleep(2 * time.Millisecond)
		}
		agMu.Lock()
		ag.stop()
		// Stay down until some call has hit the gap (or 5 s on a very slow
		// machine), so the restart is really in the middle of the burst.
		for deadline := time.Now().Add(5 * time.Second); retries.Load() == 0 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		ag = startAgent(t, dir, pools())
		agMu.Unlock()
	}()

	// retry repeats op while it fails with code 11 (agent restarting),
	// also when a main plugin wraps that error in its own.
	retry := func(op func() error) error {
		for {
			err := op()
			if err == nil || ctx.Err() != nil || !(cniCode(err) == types.ErrTryAgainLater || strings.Contains(err.Error(), "agent unreachable")) {
				return err
			}
			retries.Add(1)
			time.Sleep(10 * time.Millisecond)
		}
	}
	results := make([]netip.Prefix, pods)
	var wg sync.WaitGroup
	errs := make(chan error, pods)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < pods; i += workers {
				rt := runtimeConf(fmt.Sprintf("burst-%d", i), paths[i])
				// A failed ADD is cleaned up with DEL before the retry, as a
				// runtime tears the sandbox down before it tries again.
				err := n.do(func() error {
					return retry(func() error {
						r, err := cfg.AddNetworkList(ctx, list, rt)
						if err == nil {
							results[i] = addrsOf(t, r)[0]
							return nil
						}
						if derr := retry(func() error { return cfg.DelNetworkList(ctx, list, rt) }); derr != nil {
							return derr
						}
						return err
					})
				})
				if err != nil {
					errs <- fmt.Errorf("ADD %d: %w", i, err)
					return
				}
				done.Add(1)
				if i < dels {
					if err := n.do(func() error { return retry(func() error { return cfg.DelNetworkList(ctx, list, rt) }) }); err != nil {
						errs <- fmt.Errorf("DEL %d: %w", i, err)
						return
					}
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	<-restarted
	t.Logf("%d operations, %d retries across the agent restart", done.Load(), retries.Load())
	if retries.Load() == 0 {
		t.Fatal("no call hit the agent restart: the test proved nothing")
	}
	if done.Load() != pods+dels {
		t.Fatalf("%d operations done, want %d", done.Load(), pods+dels)
	}

	agMu.Lock()
	all := ag.alloc.All()
	agMu.Unlock()
	byID := map[string]netip.Prefix{}
	seen := map[netip.Addr]string{}
	for _, al := range all {
		for _, ip := range al.IPs {
			if other, dup := seen[ip.Address.Addr()]; dup {
				t.Fatalf("%s held by %s and %s", ip.Address, other, al.ContainerID)
			}
			seen[ip.Address.Addr()] = al.ContainerID
		}
		byID[al.ContainerID] = al.IPs[0].Address
	}
	if len(all) != pods-dels {
		t.Fatalf("agent holds %d allocations, want %d live pods", len(all), pods-dels)
	}
	for i := dels; i < pods; i++ {
		id := fmt.Sprintf("burst-%d", i)
		if byID[id] != results[i] {
			t.Fatalf("pod %s got %s from ADD, the agent records %s", id, results[i], byID[id])
		}
	}
}
