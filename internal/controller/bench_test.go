package controller

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// BenchmarkTenThousand creates MOORING_BENCH_SERVICES (default 10,000)
// pending LoadBalancer Services with the controller stopped, then times
// from controller start until the last one has an address, and counts the
// API writes per Service. Run it with
//
//	go test -run XXX -bench BenchmarkTenThousand -benchtime 1x ./internal/controller/
//
// Creating the Services is the API server's cost (minutes on 2 cores) and
// is not timed. MOORING_BENCH_QPS sets the controller's client QPS (burst
// twice that); MOORING_BENCH_WORKERS its workers.
func BenchmarkTenThousand(b *testing.B) {
	n := envInt("MOORING_BENCH_SERVICES", 10000)
	qps := envInt("MOORING_BENCH_QPS", DefaultQPS)
	workers := envInt("MOORING_BENCH_WORKERS", DefaultWorkers)
	env := startEnv(b)
	c := env.Client
	mkNamespace(b, c, "bench", nil)
	create(b, c, nsPool("bench", "", "100.70.0.0/16"))
	t0 := time.Now()
	createServices(b, env.Clientset.CoreV1().Services("bench"), n, 32)
	b.Logf("created %d Services in %s (%.0f/s), controller stopped", n, time.Since(t0).Round(time.Second), float64(n)/time.Since(t0).Seconds())

	// The watch that detects completion speaks protobuf, like the
	// controller, so measuring costs the apiserver as little as possible.
	pb := rest.CopyConfig(env.Config)
	pb.ContentType = "application/vnd.kubernetes.protobuf"
	svcs := kubernetes.NewForConfigOrDie(pb).CoreV1().Services("bench")
	w := relist(b, svcs, map[string]bool{})
	before, apiCPU0 := apiWrites(b, env.Config), apiServerCPU(b, env.Config)
	selfCPU0 := selfCPU()
	b.ResetTimer()
	start := time.Now()
	startController(b, env.Config, func(cfg *Config) {
		cfg.REST.QPS, cfg.REST.Burst = float32(qps), 2*qps
		cfg.Workers = workers
		cfg.PoolStatusInterval = DefaultPoolStatusInterval
	})
	elapsed := waitAllAssigned(b, svcs, w, n, start)
	b.StopTimer()
	apiCPU1 := apiServerCPU(b, env.Config)
	b.Logf("CPU while assigning: kube-apiserver %.1f s, test process (controller + watch) %.1f s, over %.1f s wall on %d cores",
		apiCPU1-apiCPU0, selfCPU()-selfCPU0, elapsed.Seconds(), runtime.NumCPU())
	parts, settled := settledWrites(b, env.Config, before)
	b.Logf("writes settled %s after the last address (Events trail: client-go's event sink posts one at a time)", settled.Round(time.Second))
	perSvc := (parts["services/status"] + parts["events"] + parts["loadbalancerippools/status"]) / float64(n)
	b.Logf("%d Services assigned in %s (%.0f/s) with qps=%d workers=%d; writes %v = %.2f per Service",
		n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), qps, workers, parts, perSvc)
	steadyFrom := apiWrites(b, env.Config)
	time.Sleep(5 * time.Second)
	steady, steadyParts := ownWrites(diff(apiWrites(b, env.Config), steadyFrom))
	b.Logf("steady state with %d Services, 5 s: %v writes %v", n, steady, steadyParts)
	if steady != 0 {
		b.Errorf("converged controller still writing: %v", steadyParts)
	}
	b.ReportMetric(elapsed.Seconds(), "s-to-last-address")
	b.ReportMetric(perSvc, "writes/service")
	if got := assignedIn(b, c, "bench"); len(got) != n {
		b.Errorf("%d of %d assigned", len(got), n)
	} else if dups := duplicates(got); dups > 0 {
		b.Errorf("%d addresses held twice", dups)
	}
}

// settledWrites waits until the controller's write counters stop moving
// (at most 2 min) and returns them with how long that took.
func settledWrites(b *testing.B, cfg *rest.Config, before map[string]float64) (map[string]float64, time.Duration) {
	start := time.Now()
	var last float64 = -1
	for {
		total, parts := ownWrites(diff(apiWrites(b, cfg), before))
		if total == last || time.Since(start) > 2*time.Minute {
			return parts, time.Since(start)
		}
		last = total
		time.Sleep(2 * time.Second)
	}
}

// selfCPU is this process's user+system CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

type serviceCreator interface {
	Create(context.Context, *corev1.Service, metav1.CreateOptions) (*corev1.Service, error)
}

func createServices(b *testing.B, sc serviceCreator, n, parallel int) {
	idx := make(chan int, n)
	for i := range n {
		idx <- i
	}
	close(idx)
	var wg sync.WaitGroup
	var once sync.Once
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range idx {
				_, err := sc.Create(context.Background(), lbService("bench", fmt.Sprintf("s%05d", i)), metav1.CreateOptions{})
				if err != nil {
					once.Do(func() { b.Errorf("create s%05d: %v", i, err) })
				}
				if i%2000 == 0 {
					b.Logf("creating: %d", i)
				}
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// waitAllAssigned follows a watch until n Services have an address and
// returns the time since start. The apiserver may close a watch whose
// consumer lags (a loaded 2-core box); it then re-lists and re-watches.
func waitAllAssigned(b *testing.B, svcs typedServices, w watch.Interface, n int, start time.Time) time.Duration {
	done := map[string]bool{}
	timeout := time.After(15 * time.Minute)
	for len(done) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				w = relist(b, svcs, done)
				continue
			}
			if s, isSvc := ev.Object.(*corev1.Service); isSvc && len(s.Status.LoadBalancer.Ingress) > 0 {
				done[s.Name] = true
			}
		case <-timeout:
			b.Fatalf("%d of %d assigned after 15 min", len(done), n)
		}
	}
	w.Stop()
	return time.Since(start)
}

type typedServices interface {
	List(context.Context, metav1.ListOptions) (*corev1.ServiceList, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
}

func relist(b *testing.B, svcs typedServices, done map[string]bool) watch.Interface {
	list, err := svcs.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range list.Items {
		if len(s.Status.LoadBalancer.Ingress) > 0 {
			done[s.Name] = true
		}
	}
	w, err := svcs.Watch(context.Background(), metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		b.Fatal(err)
	}
	return w
}

func duplicates(m map[string]string) int {
	seen, dups := map[string]bool{}, 0
	for _, ip := range m {
		if seen[ip] {
			dups++
		}
		seen[ip] = true
	}
	return dups
}
