package failover

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentstatus "github.com/mooringlb/mooring/internal/agent/status"
)

// This file is the only one here that touches Kubernetes: it turns the
// Service and its EndpointSlices into the plain values the rest works on,
// and deletes agent pods for a soft failover.

// ServiceInfo is what the measurement needs of the Service.
type ServiceInfo struct {
	Addrs    []netip.Addr // status.loadBalancer.ingress IPs
	TCPPorts []uint16
}

// KubeCluster implements Cluster for one Service with client-go.
type KubeCluster struct {
	Client          kubernetes.Interface
	Namespace, Name string
	// Reader reads who announces an address (agentstatus.Announcements: the
	// API objects and the agents' L2Announcers); nil: nobody is known.
	Reader client.Reader
}

// Service reads the Service.
func (k KubeCluster) Service(ctx context.Context) (ServiceInfo, error) {
	svc, err := k.Client.CoreV1().Services(k.Namespace).Get(ctx, k.Name, metav1.GetOptions{})
	if err != nil {
		return ServiceInfo{}, fmt.Errorf("reading Service %s/%s: %w", k.Namespace, k.Name, err)
	}
	return serviceInfo(svc), nil
}

func serviceInfo(svc *corev1.Service) ServiceInfo {
	var si ServiceInfo
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil {
			si.Addrs = append(si.Addrs, a.Unmap())
		}
	}
	for _, p := range svc.Spec.Ports {
		if p.Protocol == corev1.ProtocolTCP || p.Protocol == "" {
			si.TCPPorts = append(si.TCPPorts, uint16(p.Port))
		}
	}
	return si
}

// AnnouncedBy implements Cluster with internal/agent/status.Announcements.
func (k KubeCluster) AnnouncedBy(ctx context.Context, addr netip.Addr) (string, error) {
	if k.Reader == nil {
		return "", nil
	}
	anns, err := agentstatus.Announcements(ctx, k.Reader)
	if err != nil {
		return "", err
	}
	for _, a := range anns {
		if a.Addr.Unmap() == addr.Unmap() {
			return a.Node, nil
		}
	}
	return "", nil
}

func (k KubeCluster) selector() string {
	return labels.Set{discoveryv1.LabelServiceName: k.Name}.String()
}

// Endpoints implements Cluster.
func (k KubeCluster) Endpoints(ctx context.Context) ([]Endpoint, error) {
	list, err := k.Client.DiscoveryV1().EndpointSlices(k.Namespace).List(ctx, metav1.ListOptions{LabelSelector: k.selector()})
	if err != nil {
		return nil, fmt.Errorf("listing EndpointSlices of %s/%s: %w", k.Namespace, k.Name, err)
	}
	ptrs := make([]*discoveryv1.EndpointSlice, len(list.Items))
	for i := range list.Items {
		ptrs[i] = &list.Items[i]
	}
	return endpointsFromSlices(ptrs), nil
}

// WatchEndpoints implements Cluster with an informer on the Service's
// EndpointSlices; it returns when ctx ends, with the informer stopped.
func (k KubeCluster) WatchEndpoints(ctx context.Context, fn func([]Endpoint)) error {
	f := informers.NewSharedInformerFactoryWithOptions(k.Client, 0,
		informers.WithNamespace(k.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = k.selector() }))
	inf := f.Discovery().V1().EndpointSlices()
	lister := inf.Lister()
	notify := func() {
		ss, err := lister.EndpointSlices(k.Namespace).List(labels.Everything())
		if err == nil {
			fn(endpointsFromSlices(ss))
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}); err != nil {
		return fmt.Errorf("watching EndpointSlices: %w", err)
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	f.WaitForCacheSync(ctx.Done())
	<-ctx.Done()
	return nil
}

// endpointsFromSlices flattens slices. A nil ready condition counts as ready,
// as the EndpointSlice API says.
func endpointsFromSlices(ss []*discoveryv1.EndpointSlice) []Endpoint {
	var out []Endpoint
	for _, s := range ss {
		for _, e := range s.Endpoints {
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready
			node, pod := "", ""
			if e.NodeName != nil {
				node = *e.NodeName
			}
			if r := e.TargetRef; r != nil && r.Kind == "Pod" {
				pod = r.Namespace + "/" + r.Name
			}
			for _, a := range e.Addresses {
				p, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				out = append(out, Endpoint{Addr: p.Unmap(), Node: node, Pod: pod, Ready: ready})
			}
		}
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return a.Addr.Compare(b.Addr) })
	return out
}

// AgentPodKiller deletes the Mooring agent pod on a node — a soft failover:
// the node and its backends stay up, only the announcer goes.
type AgentPodKiller struct {
	Client    kubernetes.Interface
	Namespace string // where the agent DaemonSet runs
	Selector  string // label selector of the agent pods
}

// ErrNoAgentPod means no agent pod matched on the node.
var ErrNoAgentPod = errors.New("no agent pod on the node")

// Kill deletes the matching pods on node with no grace period.
func (a AgentPodKiller) Kill(ctx context.Context, node string) error {
	pods, err := a.Client.CoreV1().Pods(a.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: a.Selector,
		FieldSelector: "spec.nodeName=" + node,
	})
	if err != nil {
		return fmt.Errorf("listing agent pods (%s in %s) on %s: %w", a.Selector, a.Namespace, node, err)
	}
	n := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName != node { // fake clients ignore field selectors
			continue
		}
		zero := int64(0)
		if err := a.Client.CoreV1().Pods(a.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			return fmt.Errorf("deleting agent pod %s/%s: %w", a.Namespace, p.Name, err)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("%w: %s (selector %q in namespace %s): give --agent-selector/--agent-namespace", ErrNoAgentPod, node, a.Selector, a.Namespace)
	}
	return nil
}
