package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// LabelRun marks every pod of one run, so cleanup finds them all.
const LabelRun = "mooring.dev/probe-run"

// Requester makes one request from inside pod from to addr and says
// whether it succeeded (an HTTP answer of any status counts: the network
// delivered it).
type Requester interface {
	Request(ctx context.Context, from *corev1.Pod, to netip.AddrPort) error
}

// Config is what Run needs.
type Config struct {
	Client    kubernetes.Interface
	Namespace string
	// Nodes are the two nodes to place the pairs on; empty picks the first
	// two Ready, schedulable nodes by name.
	Nodes  []string
	Pairs  int // pairs per round, created together
	Rounds int
	Image  string
	Args   []string
	Port   int
	// Timeout bounds one sample; Interval paces the attempts; each attempt
	// has RequestTimeout.
	Timeout, Interval, RequestTimeout time.Duration
	// Threshold: a sample above it makes the run unhealthy.
	Threshold time.Duration
	Requester Requester
	Log       *slog.Logger
	// RunID labels the run's pods; empty uses the start time.
	RunID string
}

// Validate reports the first unusable setting.
func (c *Config) Validate() error {
	switch {
	case c.Client == nil || c.Requester == nil || c.Log == nil:
		return errors.New("probe: no client, requester or logger")
	case c.Pairs < 1 || c.Rounds < 1:
		return fmt.Errorf("probe: --pairs %d and --rounds %d must be at least 1", c.Pairs, c.Rounds)
	case len(c.Nodes) != 0 && len(c.Nodes) != 2:
		return fmt.Errorf("probe: give exactly two nodes, got %v", c.Nodes)
	case c.Timeout <= 0 || c.Interval <= 0 || c.RequestTimeout <= 0:
		return errors.New("probe: timeouts and interval must be positive")
	case c.Port < 1 || c.Port > 65535:
		return fmt.Errorf("probe: --port %d: use 1..65535", c.Port)
	}
	return nil
}

// Report is a run's result.
type Report struct {
	Nodes     []string      `json:"nodes"`
	Threshold time.Duration `json:"thresholdNanos"`
	Summary   Summary       `json:"summary"`
	Samples   []Sample      `json:"samples"`
}

// Run creates the pods round by round, measures and always deletes every pod
// it created, with a fresh context, even when ctx is cancelled (Ctrl-C).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.RunID == "" {
		cfg.RunID = strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	nodes := cfg.Nodes
	if len(nodes) == 0 {
		var err error
		if nodes, err = pickNodes(ctx, cfg.Client); err != nil {
			return nil, err
		}
	}
	defer cleanup(cfg)
	rep := &Report{Nodes: nodes, Threshold: cfg.Threshold}
	for r := 1; r <= cfg.Rounds; r++ {
		ss, err := round(ctx, cfg, nodes, r)
		rep.Samples = append(rep.Samples, ss...)
		if err != nil {
			rep.Summary = Summarize(rep.Samples, cfg.Threshold)
			return rep, err
		}
		cfg.Log.Info("round done", "round", r, "samples", len(ss))
	}
	rep.Summary = Summarize(rep.Samples, cfg.Threshold)
	return rep, nil
}

func pickNodes(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("probe: listing nodes: %w", err)
	}
	var out []string
	for _, n := range l.Items {
		if n.Spec.Unschedulable {
			continue
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				out = append(out, n.Name)
			}
		}
	}
	sort.Strings(out)
	if len(out) < 2 {
		return nil, fmt.Errorf("probe: need two Ready, schedulable nodes, found %v: the probe measures across nodes", out)
	}
	return out[:2], nil
}

// cleanup deletes every pod of the run, with its own deadline: the
// caller's context may already be cancelled. A create the cancelled run
// had in flight can still land after the first delete (the API server
// finishes a request whose client gave up), so it deletes again until a
// list 200 ms later finds none (CI saw one pod left otherwise).
func cleanup(cfg Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods := cfg.Client.CoreV1().Pods(cfg.Namespace)
	sel := metav1.ListOptions{LabelSelector: LabelRun + "=" + cfg.RunID}
	for {
		err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, sel)
		if err != nil && !apierrors.IsNotFound(err) {
			cfg.Log.Warn("deleting the probe's pods failed: delete them by hand", "namespace", cfg.Namespace, "selector", sel.LabelSelector, "err", err)
			return
		}
		select {
		case <-ctx.Done():
			cfg.Log.Warn("the probe's pods kept appearing: delete them by hand", "namespace", cfg.Namespace, "selector", sel.LabelSelector)
			return
		case <-time.After(200 * time.Millisecond):
		}
		if l, err := pods.List(ctx, sel); err == nil && len(l.Items) == 0 {
			break
		}
	}
	cfg.Log.Info("probe pods deleted", "namespace", cfg.Namespace, "selector", sel.LabelSelector)
}

func (cfg *Config) pod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cfg.Namespace, Labels: map[string]string{LabelRun: cfg.RunID, "app.kubernetes.io/name": "mooring-probe"}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "echo", Image: cfg.Image, Args: cfg.Args,
				Ports: []corev1.ContainerPort{{ContainerPort: int32(cfg.Port), Protocol: corev1.ProtocolTCP}},
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
					TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(cfg.Port))}}},
			}},
		},
	}
}

// round creates Pairs pairs, records when each pod turns Ready (as the
// watch delivers it) and, once both pods of a pair are Ready, measures each
// pod's first successful request to the other.
func round(ctx context.Context, cfg Config, nodes []string, r int) ([]Sample, error) {
	pods := cfg.Client.CoreV1().Pods(cfg.Namespace)
	sel := LabelRun + "=" + cfg.RunID
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("probe: watching pods: %w", err)
	}
	defer w.Stop()
	type pair struct{ a, b string }
	var pairs []pair
	for i := 0; i < cfg.Pairs; i++ {
		p := pair{fmt.Sprintf("probe-%s-r%d-p%d-a", cfg.RunID, r, i), fmt.Sprintf("probe-%s-r%d-p%d-b", cfg.RunID, r, i)}
		for j, name := range []string{p.a, p.b} {
			if _, err := pods.Create(ctx, cfg.pod(name, nodes[j]), metav1.CreateOptions{}); err != nil {
				return nil, fmt.Errorf("probe: creating pod %s on %s: %w", name, nodes[j], err)
			}
		}
		pairs = append(pairs, p)
	}
	readyAt := map[string]time.Time{}
	latest := map[string]*corev1.Pod{}
	var (
		mu      sync.Mutex
		samples []Sample
		wg      sync.WaitGroup
	)
	started := map[pair]bool{}
	deadline := time.NewTimer(cfg.Timeout + 30*time.Second)
	defer deadline.Stop()
	for len(started) < len(pairs) {
		select {
		case <-ctx.Done():
			wg.Wait()
			return samples, ctx.Err()
		case <-deadline.C:
			wg.Wait()
			return samples, fmt.Errorf("probe: round %d: pods not Ready after %s: %v", r, cfg.Timeout+30*time.Second, fmt.Sprintf("%d of %d pods Ready", len(readyAt), 2*len(pairs)))
		case ev, ok := <-w.ResultChan():
			if !ok {
				return samples, errors.New("probe: pod watch closed")
			}
			if ev.Type == watch.Error {
				return samples, fmt.Errorf("probe: pod watch: %v", apierrors.FromObject(ev.Object))
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			latest[p.Name] = p
			if _, seen := readyAt[p.Name]; !seen && isReady(p) {
				readyAt[p.Name] = now
			}
		}
		for _, p := range pairs {
			ra, okA := readyAt[p.a]
			rb, okB := readyAt[p.b]
			if started[p] || !okA || !okB {
				continue
			}
			started[p] = true
			a, b := latest[p.a], latest[p.b]
			both := ra
			if rb.After(ra) {
				both = rb
			}
			for _, dir := range []struct {
				from, to *corev1.Pod
				ready    time.Time
			}{{a, b, ra}, {b, a, rb}} {
				wg.Go(func() {
					s := measure(ctx, cfg, dir.from, dir.to, both, r)
					s.SinceOwnReady = s.Delay + both.Sub(dir.ready)
					mu.Lock()
					samples = append(samples, s)
					mu.Unlock()
				})
			}
		}
	}
	wg.Wait()
	slices.SortFunc(samples, func(x, y Sample) int { return strings.Compare(x.Pod, y.Pod) })
	// Delete this round's pods now so the next round's are new ones
	// (cleanup catches anything left).
	for _, p := range pairs {
		for _, n := range []string{p.a, p.b} {
			_ = pods.Delete(context.WithoutCancel(ctx), n, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	}
	return samples, ctx.Err()
}

func isReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// measure requests from -> to until one succeeds or the timeout passes;
// the delay counts from since, when both pods are Ready: the earliest a
// request between them can succeed, so a partner that turns Ready late
// does not count as network delay.
func measure(ctx context.Context, cfg Config, from, to *corev1.Pod, since time.Time, r int) Sample {
	s := Sample{Round: r, Pod: from.Name, Node: from.Spec.NodeName, Partner: to.Name}
	ip, err := netip.ParseAddr(to.Status.PodIP)
	if err != nil {
		s.Failed, s.Error = true, fmt.Sprintf("partner has no usable pod IP %q", to.Status.PodIP)
		return s
	}
	target := netip.AddrPortFrom(ip, uint16(cfg.Port))
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	for {
		s.Attempts++
		rctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
		err := cfg.Requester.Request(rctx, from, target)
		cancel()
		now := time.Now()
		s.Delay = now.Sub(since)
		if err == nil {
			return s
		}
		if s.Delay >= cfg.Timeout || ctx.Err() != nil {
			s.Failed, s.Error = true, err.Error()
			return s
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}
