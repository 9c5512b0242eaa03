package convert

import (
	"net"
	"net/netip"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
)

// Objects are what the informer caches hold, as the conversion needs them.
type Objects struct {
	Policies []mooringv1.L2AnnouncementPolicy
	Services []corev1.Service
	Slices   []discoveryv1.EndpointSlice
	Nodes    []corev1.Node
}

// Input converts API objects into the core's input (Members, Local and
// Interfaces are filled by the caller). It is the only place that knows how
// Kubernetes spells what the core decides on.
func Input(s Objects) announce.Input {
	var in announce.Input
	in.Policies = Policies(s.Policies)
	in.Nodes = Nodes(s.Nodes)
	ready := ReadyNodes(s.Slices)
	for i := range s.Services {
		svc := &s.Services[i]
		in.Services = append(in.Services, Service(svc, ready[Key(svc)]))
	}
	return in
}

func Nodes(nodes []corev1.Node) []announce.Node {
	out := make([]announce.Node, 0, len(nodes))
	for i := range nodes {
		out = append(out, announce.Node{Name: nodes[i].Name, Labels: nodes[i].Labels})
	}
	return out
}

func Policies(pols []mooringv1.L2AnnouncementPolicy) []announce.Policy {
	var out []announce.Policy
	for i := range pols {
		out = append(out, Policy(&pols[i]))
	}
	return out
}

func Key(svc *corev1.Service) announce.ServiceKey {
	return announce.ServiceKey{Namespace: svc.Namespace, Name: svc.Name}
}

// Service turns one Service and the nodes with a ready endpoint of
// it into the core's Service.
func Service(svc *corev1.Service, ready []string) announce.Service {
	return announce.Service{
		Key:          Key(svc),
		Labels:       svc.Labels, // the virtual labels come from Key (announce.LabelServiceName)
		IngressIPs:   IngressIPs(svc),
		ExternalIPs:  Addrs(svc.Spec.ExternalIPs),
		LocalTraffic: svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
		ReadyNodes:   ready,
	}
}

func Policy(p *mooringv1.L2AnnouncementPolicy) announce.Policy {
	return announce.Policy{
		Name:            p.Name,
		ServiceSelector: Selector(p.Spec.ServiceSelector),
		NodeSelector:    Selector(p.Spec.NodeSelector),
		Interfaces:      p.Spec.Interfaces,
		// The CRD defaults it to true; an object written before the
		// default existed means the same.
		LoadBalancerIPs: p.Spec.LoadBalancerIPs == nil || *p.Spec.LoadBalancerIPs,
		ExternalIPs:     p.Spec.ExternalIPs,
		Ranking:         ranking(p.Spec.Ranking),
	}
}

// ranking maps the API's ranking to the core's; an unknown value
// (admission rejects them) reaches the core, which reports it.
func ranking(r mooringv1.L2Ranking) announce.Ranking {
	if r == "" || r == mooringv1.L2RankingMooring {
		return announce.RankingMooring
	}
	return announce.Ranking(r)
}

func Selector(s *metav1.LabelSelector) *announce.Selector {
	if s == nil {
		return nil
	}
	out := &announce.Selector{MatchLabels: s.MatchLabels}
	for _, r := range s.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, announce.Requirement{
			Key: r.Key, Operator: announce.Operator(r.Operator), Values: r.Values,
		})
	}
	return out
}

// IngressIPs are the LoadBalancer addresses of Services Mooring serves:
// type LoadBalancer with no class or Mooring's. Addresses another
// implementation assigned are its to announce.
func IngressIPs(svc *corev1.Service) []netip.Addr {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return nil
	}
	if c := svc.Spec.LoadBalancerClass; c != nil && *c != mooringv1.LoadBalancerClass {
		return nil
	}
	var ips []string
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		ips = append(ips, ing.IP)
	}
	return Addrs(ips)
}

func Addrs(ss []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// ReadyNodes maps each Service to the nodes with a ready endpoint of it.
// An absent ready condition means ready (the EndpointSlice API says so).
func ReadyNodes(slices []discoveryv1.EndpointSlice) map[announce.ServiceKey][]string {
	out := map[announce.ServiceKey][]string{}
	for i := range slices {
		es := &slices[i]
		name := es.Labels[discoveryv1.LabelServiceName]
		if name == "" {
			continue
		}
		key := announce.ServiceKey{Namespace: es.Namespace, Name: name}
		for _, ep := range es.Endpoints {
			if ep.NodeName == nil || *ep.NodeName == "" || (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) {
				continue
			}
			out[key] = append(out[key], *ep.NodeName)
		}
	}
	return out
}

// PeersOf returns the gossip addresses (InternalIP:port) of every node but
// self. Nodes without an InternalIP cannot be joined.
func PeersOf(nodes []corev1.Node, self string, port int) []string {
	var out []string
	for i := range nodes {
		n := &nodes[i]
		if n.Name == self {
			continue
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && a.Address != "" {
				out = append(out, net.JoinHostPort(a.Address, strconv.Itoa(port)))
			}
		}
	}
	return out
}

// InternalIPs are a Node's InternalIP addresses.
func InternalIPs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}
