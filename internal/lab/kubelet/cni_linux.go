package kubelet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
)

// cniNet sets up pods' networks through libcni, as a container runtime
// does: the pod's namespace (its echo process's, held open by the kubelet
// like a sandbox's until DEL), the loopback network on lo, the pod network
// on eth0, CNI_ARGS with the pod's namespace and name; DEL when the pod
// goes, and at start a GC with the attachments still valid (none: a killed
// kubelet's pods died with it).
type cniNet struct {
	log      *slog.Logger
	cni      *libcni.CNIConfig
	list, lo *libcni.NetworkConfigList
}

// loopbackConf is the loopback network containerd and CRI-O attach to
// every sandbox's lo.
const loopbackConf = `{"cniVersion":"1.1.0","name":"cni-loopback","plugins":[{"type":"loopback"}]}`

func newCNINet(cfg CNIConfig, log *slog.Logger) (*cniNet, error) {
	list, err := libcni.ConfListFromFile(cfg.ConfList)
	if err != nil {
		return nil, fmt.Errorf("kubelet: pod network config %s: %w", cfg.ConfList, err)
	}
	lo, err := libcni.ConfListFromBytes([]byte(loopbackConf))
	if err != nil {
		return nil, err
	}
	if cfg.CacheDir == "" || len(cfg.BinDirs) == 0 {
		return nil, errors.New("kubelet: CNI needs plugin folders and a cache folder")
	}
	return &cniNet{log: log, cni: libcni.NewCNIConfigWithCacheDir(cfg.BinDirs, cfg.CacheDir, nil), list: list, lo: lo}, nil
}

// status runs the network's CNI STATUS, as a runtime does for the
// kubelet's NetworkReady, bounded so that a hung plugin reads as a failure.
func (n *cniNet) status(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	err := n.cni.GetStatusNetworkList(ctx, n.list)
	if te, ok := errors.AsType[*types.Error](err); ok {
		// The CNI error code says which kind of failure (50: the plugin is
		// not available); its message alone does not.
		return fmt.Errorf("%w (CNI error code %d)", err, te.Code)
	}
	return err
}

// statusTimeout bounds one CNI STATUS.
const statusTimeout = 10 * time.Second

// ready waits for the network's STATUS to succeed (the agent serving with
// a block), then GCs with no valid attachment: this kubelet runs no pod
// yet, so whatever the cache and the IPAM still hold is an earlier run's.
func (n *cniNet) ready(ctx context.Context) error {
	start := time.Now()
	logged := false
	for {
		err := n.status(ctx)
		if err == nil {
			break
		}
		if !logged {
			n.log.Info("pod network not ready yet; waiting", "network", n.list.Name, "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	gc := &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}}
	if err := n.cni.GCNetworkList(ctx, n.list, gc); err != nil {
		// Pods can run regardless; what is left stays allocated until the
		// next GC.
		n.log.Warn("CNI GC of what an earlier run left failed", "network", n.list.Name, "err", err)
	}
	n.log.Info("pod network ready", "network", n.list.Name, "waited", time.Since(start).Round(time.Millisecond))
	return nil
}

func (n *cniNet) wire(ctx context.Context, _ *corev1.Pod, p *pod) error {
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", p.proc.pid()))
	if err != nil {
		return fmt.Errorf("kubelet: pod %s namespace: %w", p.key, err)
	}
	p.netns = f
	if _, err := n.cni.AddNetworkList(ctx, n.lo, n.runtimeConf(p, loIfName)); err != nil {
		return fmt.Errorf("kubelet: pod %s: network %s: %w", p.key, n.lo.Name, err)
	}
	res, err := n.cni.AddNetworkList(ctx, n.list, n.runtimeConf(p, podIfName))
	if err != nil {
		return fmt.Errorf("kubelet: pod %s: network %s: %w", p.key, n.list.Name, err)
	}
	if p.addrs, err = resultAddrs(res); err != nil {
		return fmt.Errorf("kubelet: pod %s: network %s: %w", p.key, n.list.Name, err)
	}
	return nil
}

// unwire DELs both networks while the namespace is still held, then lets
// it go. A DEL that fails is logged: the next GC frees what it kept.
func (n *cniNet) unwire(ctx context.Context, p *pod) {
	if p.netns == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := n.cni.DelNetworkList(ctx, n.list, n.runtimeConf(p, podIfName)); err != nil {
		n.log.Warn("CNI DEL failed", "pod", p.key, "network", n.list.Name, "err", err)
	}
	if err := n.cni.DelNetworkList(ctx, n.lo, n.runtimeConf(p, loIfName)); err != nil {
		n.log.Warn("CNI DEL failed", "pod", p.key, "network", n.lo.Name, "err", err)
	}
	p.netns.Close()
	p.netns = nil
}

// runtimeConf is what the runtime passes for one attachment. The
// namespace path goes through this process's descriptor, which keeps the
// namespace alive after the echo process exits, as a sandbox would.
func (n *cniNet) runtimeConf(p *pod, ifName string) *libcni.RuntimeConf {
	ns, name, _ := strings.Cut(p.key, "/")
	return &libcni.RuntimeConf{
		ContainerID: p.uid,
		NetNS:       fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), p.netns.Fd()),
		IfName:      ifName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", ns},
			{"K8S_POD_NAME", name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.uid},
			{"K8S_POD_UID", p.uid},
		},
	}
}

// resultAddrs returns a result's addresses, IPv4 first.
func resultAddrs(r types.Result) ([]netip.Addr, error) {
	res, err := current.NewResultFromResult(r)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, ip := range res.IPs {
		if a, ok := netip.AddrFromSlice(ip.Address.IP); ok && !slices.Contains(out, a.Unmap()) {
			out = append(out, a.Unmap())
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the result has no address")
	}
	slices.SortStableFunc(out, func(a, b netip.Addr) int {
		switch {
		case a.Is4() == b.Is4():
			return 0
		case a.Is4():
			return -1
		}
		return 1
	})
	return out, nil
}
