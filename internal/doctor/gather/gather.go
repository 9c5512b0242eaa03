// Package gather is `mooring doctor`'s adapter: it reads, read-only, what
// the checks in internal/doctor need from the cluster (and from each node's
// agent metrics, when reachable) and fills doctor.Inputs.
package gather

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/bgpagent"
	"github.com/mooringlb/mooring/internal/doctor"
	"github.com/mooringlb/mooring/internal/ipalloc"
)

// Options say what the cluster cannot tell.
type Options struct {
	// NodeSubnets are the nodes' L2 networks: by node name, or for every
	// node under "". Without them the /24 (IPv4) and /64 (IPv6) around
	// each InternalIP are assumed, and findings say so.
	NodeSubnets map[string][]netip.Prefix
	// Metrics reads a node's agent metrics; nil means "not asked for", an
	// error "unreachable" (a finding of its own). HTTPMetrics is the usual
	// one.
	Metrics func(ctx context.Context, node *corev1.Node) ([]byte, error)
	// Readyz reads a node's agent /readyz; nil: not asked for.
	// HTTPReadyz is the usual one.
	Readyz func(ctx context.Context, node *corev1.Node) (*doctor.Readiness, error)
	// Responders, when set, runs the ARP/NDP audit of the pools'
	// addresses from a host on the Services' segment (Interface names it
	// in findings).
	Responders ResponderFunc
	Interface  string
	// Now is the clock for event ages.
	Now func() time.Time
	// Reader, when set, lets doctor compute who announces each address the
	// way the agents do (Announced, from their L2Announcers); without it no
	// address counts as announced by Mooring.
	Reader client.Reader
}

var (
	gvrPools    = schema.GroupVersionResource{Group: mooringv1.GroupVersion.Group, Version: mooringv1.GroupVersion.Version, Resource: "loadbalancerippools"}
	gvrPolicies = schema.GroupVersionResource{Group: mooringv1.GroupVersion.Group, Version: mooringv1.GroupVersion.Version, Resource: "l2announcementpolicies"}
	gvrMetalLB  = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}
	gvrCiliumL2 = schema.GroupVersionResource{Group: "cilium.io", Version: "v2alpha1", Resource: "ciliuml2announcementpolicies"}
)

// Gather reads one snapshot.
func Gather(ctx context.Context, cs kubernetes.Interface, dc dynamic.Interface, opt Options) (doctor.Inputs, error) {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	var in doctor.Inputs
	var err error
	if in.Pools, err = pools(ctx, dc); err != nil {
		return in, err
	}
	nodeSels, err := policies(ctx, dc)
	if err != nil {
		return in, err
	}
	in.Policies = len(nodeSels)
	if in.PolicyGenerations, in.Agents, err = agentConfigs(ctx, dc); err != nil {
		return in, err
	}
	nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("listing Nodes: %w", err)
	}
	in.Nodes = nodes(ctx, nl.Items, nodeSels, opt)
	announced, err := Announced(ctx, opt.Reader)
	if err != nil {
		return in, err
	}
	if in.Services, err = services(ctx, cs, announced); err != nil {
		return in, err
	}
	if opt.Reader != nil {
		adv, err := bgpagent.ReadAdvertised(ctx, opt.Reader)
		if err != nil {
			return in, err
		}
		bgpFacts(&in, adv)
	}
	if in.Events, err = events(ctx, cs, opt.Now()); err != nil {
		return in, err
	}
	if in.KubeProxy, err = kubeProxy(ctx, cs); err != nil {
		return in, err
	}
	if in.Foreign, _, err = foreign(ctx, cs, dc, opt.Now()); err != nil {
		return in, err
	}
	if in.Audit, err = audit(ctx, &in, nl.Items, opt); err != nil {
		return in, err
	}
	return in, nil
}

func list(ctx context.Context, dc dynamic.Interface, gvr schema.GroupVersionResource) ([]unstructured.Unstructured, error) {
	l, err := dc.Resource(gvr).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil // not installed
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
	}
	return l.Items, nil
}

func pools(ctx context.Context, dc dynamic.Interface) ([]doctor.Pool, error) {
	items, err := list(ctx, dc, gvrPools)
	if err != nil {
		return nil, err
	}
	var out []doctor.Pool
	for _, it := range items {
		var p mooringv1.LoadBalancerIPPool
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(it.Object, &p); err != nil {
			return nil, fmt.Errorf("pool %s: %w", it.GetName(), err)
		}
		dp := doctor.Pool{Name: p.Name, Disabled: p.Spec.Disabled}
		for _, b := range p.Spec.Blocks {
			if r, ok := blockRange(b.CIDR, b.Start, b.Stop); ok {
				dp.Ranges = append(dp.Ranges, r)
			}
		}
		out = append(out, dp)
	}
	return out, nil
}

// blockRange parses a CIDR or a start/stop pair; unparsable blocks are the
// controller's to report (pool condition), not doctor's.
func blockRange(cidr, start, stop string) (doctor.Range, bool) {
	if cidr != "" {
		p, err := netip.ParsePrefix(strings.TrimSpace(cidr))
		if err != nil {
			return doctor.Range{}, false
		}
		p = p.Masked()
		return doctor.Range{First: p.Addr(), Last: ipalloc.LastAddr(p)}, true
	}
	a, err1 := netip.ParseAddr(strings.TrimSpace(start))
	b, err2 := netip.ParseAddr(strings.TrimSpace(stop))
	if err1 != nil || err2 != nil {
		return doctor.Range{}, false
	}
	return doctor.Range{First: a, Last: b}, true
}

var gvrAnnouncers = schema.GroupVersionResource{Group: mooringv1.GroupVersion.Group, Version: mooringv1.GroupVersion.Version, Resource: "l2announcers"}

// agentConfigs returns the policies' generations and what each agent's
// L2Announcer says it applied.
func agentConfigs(ctx context.Context, dc dynamic.Interface) (map[string]int64, []doctor.Agent, error) {
	items, err := list(ctx, dc, gvrPolicies)
	if err != nil {
		return nil, nil, err
	}
	gens := map[string]int64{}
	for _, it := range items {
		gens[it.GetName()] = it.GetGeneration()
	}
	anns, err := list(ctx, dc, gvrAnnouncers)
	if err != nil {
		return nil, nil, err
	}
	var agents []doctor.Agent
	for _, it := range anns {
		var a mooringv1.L2Announcer
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(it.Object, &a); err != nil {
			return nil, nil, fmt.Errorf("L2Announcer %s: %w", it.GetName(), err)
		}
		da := doctor.Agent{Node: a.Name, Reports: a.Status.Applied != nil, Policies: map[string]int64{}}
		if a.Status.Applied != nil {
			for _, p := range a.Status.Applied.Policies {
				da.Policies[p.Name] = p.Generation
			}
		}
		agents = append(agents, da)
	}
	return gens, agents, nil
}

// policies returns each policy's node selector.
func policies(ctx context.Context, dc dynamic.Interface) ([]labels.Selector, error) {
	items, err := list(ctx, dc, gvrPolicies)
	if err != nil {
		return nil, err
	}
	var out []labels.Selector
	for _, it := range items {
		var p mooringv1.L2AnnouncementPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(it.Object, &p); err != nil {
			return nil, fmt.Errorf("policy %s: %w", it.GetName(), err)
		}
		sel := labels.Everything()
		if p.Spec.NodeSelector != nil {
			if sel, err = metav1.LabelSelectorAsSelector(p.Spec.NodeSelector); err != nil {
				continue // the agents report an invalid policy on its status
			}
		}
		out = append(out, sel)
	}
	return out, nil
}

// nodes reads each Node's subnets and, when asked, its agent's metrics
// and readiness, all agents at once (an unreachable one costs its timeout,
// not the sum).
func nodes(ctx context.Context, items []corev1.Node, sels []labels.Selector, opt Options) []doctor.Node {
	out := make([]doctor.Node, len(items))
	var wg sync.WaitGroup
	for i := range items {
		n := &items[i]
		dn := &out[i]
		*dn = doctor.Node{Name: n.Name, Subnets: nodeSubnets(n, opt.NodeSubnets)}
		dn.SubnetsAssumed = len(opt.NodeSubnets[n.Name])+len(opt.NodeSubnets[""]) == 0 && len(dn.Subnets) > 0
		for _, s := range sels {
			dn.Announcing = dn.Announcing || s.Matches(labels.Set(n.Labels))
		}
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && (a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP) {
				dn.Addresses = append(dn.Addresses, ip.Unmap())
			}
		}
		wg.Go(func() {
			if opt.Metrics != nil {
				if b, err := opt.Metrics(ctx, n); err == nil {
					dn.Metrics = ParseMetrics(b)
				} else {
					dn.MetricsErr = err.Error()
				}
			}
			if opt.Readyz != nil && dn.MetricsErr == "" {
				if r, err := opt.Readyz(ctx, n); err == nil {
					dn.Readiness = r
				}
			}
		})
	}
	wg.Wait()
	return out
}

// nodeSubnets are the operator's subnets for n, else the /24 (/64) around
// each InternalIP.
func nodeSubnets(n *corev1.Node, given map[string][]netip.Prefix) []netip.Prefix {
	out := append(slices.Clone(given[n.Name]), given[""]...)
	if len(out) > 0 {
		return out
	}
	for _, a := range n.Status.Addresses {
		ip, err := netip.ParseAddr(a.Address)
		if a.Type != corev1.NodeInternalIP || err != nil {
			continue
		}
		bits := 24
		if ip.Is6() {
			bits = 64
		}
		p, _ := ip.Prefix(bits)
		out = append(out, p)
	}
	return out
}

func services(ctx context.Context, cs kubernetes.Interface, announced map[netip.Addr]string) ([]doctor.Service, error) {
	l, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Services: %w", err)
	}
	var out []doctor.Service
	for _, s := range l.Items {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		ds := doctor.Service{Namespace: s.Namespace, Name: s.Name, AnnouncedBy: map[netip.Addr]string{}}
		for _, ing := range s.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(ing.IP); err == nil {
				ds.Addrs = append(ds.Addrs, a.Unmap())
			}
		}
		for _, a := range ds.Addrs {
			if n := announced[a]; n != "" {
				ds.AnnouncedBy[a] = n
			}
		}
		ds.Ours = len(ds.AnnouncedBy) > 0
		out = append(out, ds)
	}
	return out, nil
}

// bgpFacts fills in what the checks know of BGP from adv: the peers, the
// pools the advertisements select (routed, so off the nodes' segments
// by design), and per Service the nodes whose BGP decision advertises each
// address (a Service advertised over BGP is Mooring's too).
func bgpFacts(in *doctor.Inputs, adv bgpagent.Advertised) {
	for _, p := range adv.Peers {
		if a, err := netip.ParseAddr(p.Spec.PeerAddress); err == nil {
			in.BGPPeers = append(in.BGPPeers, doctor.BGPPeer{Name: p.Name, Address: a.Unmap()})
		}
	}
	for i := range in.Pools {
		in.Pools[i].BGP = slices.Contains(adv.Pools, in.Pools[i].Name)
	}
	for _, sp := range adv.Speakers {
		for _, p := range sp.Status.Peers {
			in.BGPSessions = append(in.BGPSessions, doctor.BGPSession{Node: sp.Name, Peer: p.Name, Address: p.PeerAddress,
				Established: p.State == mooringv1.BGPStateEstablished, State: string(p.State), Reason: p.Reason,
				Message: p.Message, Received: p.PrefixesReceived})
		}
	}
	for i := range in.Services {
		s := &in.Services[i]
		for _, a := range s.Addrs {
			var nodes []string
			for _, c := range adv.Routes[a] {
				if !slices.Contains(nodes, c.Node) {
					nodes = append(nodes, c.Node)
				}
			}
			if len(nodes) == 0 {
				continue
			}
			if s.AdvertisedBy == nil {
				s.AdvertisedBy = map[netip.Addr][]string{}
			}
			s.AdvertisedBy[a], s.Ours = nodes, true
		}
	}
}

func events(ctx context.Context, cs kubernetes.Interface, now time.Time) ([]doctor.Event, error) {
	var out []doctor.Event
	for _, reason := range []string{doctor.ReasonStaleLocalAddress, doctor.ReasonSplitBrain} {
		l, err := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason})
		if err != nil {
			return nil, fmt.Errorf("listing Events: %w", err)
		}
		for _, e := range l.Items {
			if e.InvolvedObject.Kind != "Service" {
				continue
			}
			// Only Events about a Service that still exists count.
			if _, err := cs.CoreV1().Services(e.InvolvedObject.Namespace).Get(ctx, e.InvolvedObject.Name, metav1.GetOptions{}); err != nil {
				continue
			}
			node := e.Source.Host
			if node == "" {
				node = e.ReportingInstance
			}
			when := e.LastTimestamp.Time
			if when.IsZero() {
				when = e.EventTime.Time
			}
			out = append(out, doctor.Event{Reason: e.Reason, Message: e.Message, Node: node,
				Service: e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name, Age: now.Sub(when).Round(time.Second).String(), Time: when})
		}
	}
	return out, nil
}

// kubeProxy reads kube-system/kube-proxy's config.conf (kubeadm's layout).
func kubeProxy(ctx context.Context, cs kubernetes.Interface) (doctor.KubeProxy, error) {
	cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return doctor.KubeProxy{}, nil
	}
	if err != nil {
		return doctor.KubeProxy{}, fmt.Errorf("reading kube-system/kube-proxy: %w", err)
	}
	return ParseKubeProxy(cm.Data["config.conf"]), nil
}

// ParseKubeProxy reads mode and ipvs.strictARP from a
// KubeProxyConfiguration.
func ParseKubeProxy(conf string) doctor.KubeProxy {
	var c struct {
		Mode string `json:"mode"`
		IPVS struct {
			StrictARP bool `json:"strictARP"`
		} `json:"ipvs"`
	}
	_ = yaml.Unmarshal([]byte(conf), &c) // unreadable: treated as the default mode
	return doctor.KubeProxy{Found: true, Mode: c.Mode, StrictARP: c.IPVS.StrictARP}
}
