// Package kubelet is the lab's kubelet stand-in: one process per node
// namespace that registers the Node, keeps its Lease and Ready status fresh,
// and runs the pods bound to it whose image is Image as `mooring lab echo`
// processes, each in a network namespace of its own, wired either by the
// stand-in itself (a veth pair and a static address of the node's pod CIDR)
// or, given a CNI config, through libcni as a container runtime does
// (cni_linux.go). With --mooring-image it also runs the pods of Mooring's
// image (the lab's chart install) with the lab's mooring binary: see
// startMooring. Other pods bound to it (hostNetwork, other images) it
// leaves alone.
//
// It plays only the parts of a kubelet that Mooring's experiments observe:
// heartbeats (so node-lifecycle notices a dead node), pod IPs and readiness
// (so EndpointSlices are real). No images, volumes or probes beyond one TCP
// check. Killing the process group kills the node and its pods at once.
package kubelet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Version is what the Node reports as its kubelet version.
const Version = "v1.37.2-mooring-lab"

// Config is what Run needs.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	// NodeIPs are eth0's addresses, IPv4 first.
	NodeIPs []netip.Addr
	// PodCIDRs are this node's pod ranges, IPv4 first, one per family, for
	// the stand-in's own wiring; the Node is registered with them. Unused
	// with CNI, where the Node's pod CIDRs are someone else's to write.
	PodCIDRs []netip.Prefix
	// CNI, when set, sets up every pod's network through libcni, as a
	// container runtime does (see cni_linux.go).
	CNI *CNIConfig
	// Labels are added to the Node's own (hostname, os, arch).
	Labels map[string]string
	// Self is the mooring executable that runs `lab echo` in each pod.
	Self string
	// LogDir receives one log per pod; "" discards pod output.
	LogDir string
	// MooringImage, when set (to MooringImage), makes the node run the pods
	// of that image repository with Self (see startMooring); PodsDir then
	// holds their files (tokens, volumes), PodEnv is added to their
	// environment (the lab's, e.g. a test binary's switch), and CACert is
	// the cluster CA they get as ca.crt.
	MooringImage string
	PodsDir      string
	PodEnv       []string
	CACert       []byte
	// LeaseInterval and StatusInterval are the heartbeat periods.
	LeaseInterval, StatusInterval time.Duration
	// NetworkInterval is how often the pod network's health (CNI STATUS)
	// is checked for the Node's Ready condition; 0 means
	// DefaultNetworkInterval. A change is written at once.
	NetworkInterval time.Duration
	Log             *slog.Logger
}

// DefaultNetworkInterval is how often the network is checked: the
// kubelet asks the runtime every 5 s, and a runtime's answer can lag too.
const DefaultNetworkInterval = 2 * time.Second

// Validate reports the first unusable setting.
func (c *Config) Validate() error {
	switch {
	case c.Client == nil || c.Log == nil:
		return errors.New("kubelet: no client or logger")
	case c.NodeName == "":
		return errors.New("kubelet: --node-name is required")
	case len(c.NodeIPs) == 0:
		return errors.New("kubelet: --node-ips is required")
	case len(c.PodCIDRs) == 0 && c.CNI == nil:
		return errors.New("kubelet: --pod-cidrs or --cni-conf is required")
	case c.Self == "":
		return errors.New("kubelet: no mooring executable to run pods with")
	case c.MooringImage != "" && (c.PodsDir == "" || len(c.CACert) == 0):
		return errors.New("kubelet: running Mooring's pods needs --pods-dir and the cluster CA")
	case c.LeaseInterval <= 0 || c.StatusInterval <= 0 || c.NetworkInterval < 0:
		return errors.New("kubelet: heartbeat intervals must be positive")
	}
	return nil
}

// Run registers the node and runs until ctx ends; it then stops its pods.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.NetworkInterval == 0 {
		cfg.NetworkInterval = DefaultNetworkInterval
	}
	k := &kubelet{cfg: cfg, log: cfg.Log.With("node", cfg.NodeName), pods: map[string]*pod{}, ignored: map[string]bool{},
		statusNow: make(chan struct{}, 1)}
	if cfg.CNI != nil {
		n, err := newCNINet(*cfg.CNI, k.log)
		if err != nil {
			return err
		}
		k.net = n
	} else {
		k.net = newStaticNet(cfg.PodCIDRs)
	}
	// The Node is registered NotReady until its network says otherwise,
	// as a kubelet's is while the runtime reports NetworkReady=false.
	k.checkNetwork(ctx)
	// The apiserver may answer /readyz before every write path works (its
	// post-start hooks create kube-node-lease, for one): retry, bounded.
	var err error
	for try := 0; try < 60; try++ {
		if err = k.register(ctx); err == nil || ctx.Err() != nil {
			break
		}
		k.log.Warn("registering node; retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	if err != nil {
		return err
	}
	k.log.Info("node registered", "ips", cfg.NodeIPs, "podCIDRs", cfg.PodCIDRs)
	var wg sync.WaitGroup
	wg.Go(func() { k.heartbeat(ctx) })
	wg.Go(func() { k.watchNetwork(ctx) })
	err = k.runPods(ctx)
	wg.Wait()
	k.stopAll()
	return err
}

type kubelet struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	pods    map[string]*pod // by namespace/name
	ignored map[string]bool // pods left alone (see runnable), logged once
	net     network

	requeue func(key string) // set by runPods: re-sync a pod whose process exited

	// netErr is the last network check's failure (nil: NetworkReady),
	// under mu; statusNow asks the heartbeat for a status write now.
	netErr    error
	statusNow chan struct{}
}

// checkNetwork runs the network's STATUS and records the outcome; it
// reports whether NetworkReady changed (or its reason did).
func (k *kubelet) checkNetwork(ctx context.Context) bool {
	err := k.net.status(ctx)
	if ctx.Err() != nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	changed := (err == nil) != (k.netErr == nil) || err != nil && err.Error() != k.netErr.Error()
	k.netErr = err
	return changed
}

// watchNetwork checks the network every NetworkInterval and has the
// status written as soon as NetworkReady changes, until ctx ends.
func (k *kubelet) watchNetwork(ctx context.Context) {
	t := time.NewTicker(k.cfg.NetworkInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !k.checkNetwork(ctx) {
			continue
		}
		if err := k.networkErr(); err != nil {
			k.log.Warn("pod network not ready: the Node reports NotReady", "err", err)
		} else {
			k.log.Info("pod network ready again: the Node reports Ready")
		}
		k.writeStatusNow()
	}
}

// writeStatusNow asks the heartbeat for a status write now.
func (k *kubelet) writeStatusNow() {
	select {
	case k.statusNow <- struct{}{}:
	default:
	}
}

func (k *kubelet) networkErr() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.netErr
}

// register creates the Node (or takes over one left by an earlier run) with
// its pod CIDRs, addresses and a Ready condition.
func (k *kubelet) register(ctx context.Context) error {
	nodes := k.cfg.Client.CoreV1().Nodes()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: k.cfg.NodeName, Labels: map[string]string{
			corev1.LabelHostname:   k.cfg.NodeName,
			corev1.LabelOSStable:   "linux",
			corev1.LabelArchStable: runtime.GOARCH,
		}},
	}
	// With CNI the Node's pod CIDRs are kube-controller-manager's or
	// Mooring's to write, as with a kubelet without --pod-cidr.
	if k.cfg.CNI == nil {
		for _, p := range k.cfg.PodCIDRs {
			node.Spec.PodCIDRs = append(node.Spec.PodCIDRs, p.String())
		}
		node.Spec.PodCIDR = node.Spec.PodCIDRs[0]
	}
	for k, v := range k.cfg.Labels {
		node.Labels[k] = v
	}
	if _, err := nodes.Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubelet: registering node %s: %w", k.cfg.NodeName, err)
	}
	return k.updateStatus(ctx)
}

// updateStatus writes the node's full status with a fresh heartbeat.
func (k *kubelet) updateStatus(ctx context.Context) error {
	nodes := k.cfg.Client.CoreV1().Nodes()
	node, err := nodes.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("kubelet: reading node %s: %w", k.cfg.NodeName, err)
	}
	now := metav1.Now()
	node.Status = k.nodeStatus(node.Status, now, k.networkErr())
	if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("kubelet: updating node %s status: %w", k.cfg.NodeName, err)
	}
	return nil
}

// nodeStatus is the status the node reports at now: Ready unless netErr
// (the pod network's STATUS failed); transition times are kept while a
// condition's status does not change.
func (k *kubelet) nodeStatus(old corev1.NodeStatus, now metav1.Time, netErr error) corev1.NodeStatus {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("2"),
		corev1.ResourceMemory: resource.MustParse("4Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	st := corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       corev1.NodeRunning,
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion: Version, OperatingSystem: "linux", Architecture: runtime.GOARCH,
			ContainerRuntimeVersion: "mooring-lab://" + Version,
			OSImage:                 "Mooring lab node (network namespace)",
			KernelVersion:           kernelVersion(),
		},
	}
	for _, a := range k.cfg.NodeIPs {
		st.Addresses = append(st.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a.String()})
	}
	st.Addresses = append(st.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: k.cfg.NodeName})
	want := []condition{
		readyCondition(netErr),
		{corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", ""},
		{corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", ""},
		{corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", ""},
	}
	for _, w := range want {
		c := corev1.NodeCondition{Type: w.t, Status: w.s, Reason: w.reason, Message: w.message,
			LastHeartbeatTime: now, LastTransitionTime: now}
		for _, o := range old.Conditions {
			if o.Type == w.t && o.Status == w.s {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		st.Conditions = append(st.Conditions, c)
	}
	return st
}

type condition struct {
	t       corev1.NodeConditionType
	s       corev1.ConditionStatus
	reason  string
	message string
}

// readyCondition is Ready, or NotReady in a kubelet's words when the
// runtime's network is not ready (its CNI STATUS failed).
func readyCondition(netErr error) condition {
	if netErr != nil {
		return condition{corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady",
			"container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: " + netErr.Error()}
	}
	return condition{corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "lab kubelet stand-in is posting ready status"}
}

// heartbeat renews the node Lease every LeaseInterval and rewrites the
// status every StatusInterval, as the kubelet does, until ctx ends.
// Failures are logged and retried at the next tick: a node that cannot
// reach the apiserver is exactly what node-lifecycle is there to notice.
func (k *kubelet) heartbeat(ctx context.Context) {
	lease := time.NewTicker(k.cfg.LeaseInterval)
	defer lease.Stop()
	status := time.NewTicker(k.cfg.StatusInterval)
	defer status.Stop()
	if err := k.renewLease(ctx); err != nil {
		k.log.Warn("renewing node lease", "err", err)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-lease.C:
			if err := k.renewLease(ctx); err != nil && ctx.Err() == nil {
				k.log.Warn("renewing node lease", "err", err)
			}
		case <-k.statusNow:
			if err := k.updateStatus(ctx); err != nil && ctx.Err() == nil {
				// A change of Ready must not wait for the next tick.
				k.log.Warn("updating node status; retrying", "err", err)
				time.AfterFunc(500*time.Millisecond, k.writeStatusNow)
			}
		case <-status.C:
			if err := k.updateStatus(ctx); err != nil && ctx.Err() == nil {
				k.log.Warn("updating node status", "err", err)
			}
		}
	}
}

func (k *kubelet) renewLease(ctx context.Context) error {
	leases := k.cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: k.cfg.NodeName, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(k.cfg.NodeName),
				LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime:            &now,
			},
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// kernelVersion is the machine's kernel release, shared by every lab node.
func kernelVersion() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
