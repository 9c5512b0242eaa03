package foreignlb

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// The other implementations' resources.
var (
	GVRMetalLBPools    = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}
	GVRMetalLBL2Status = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "servicel2statuses"}
	GVRCiliumL2        = schema.GroupVersionResource{Group: "cilium.io", Version: "v2alpha1", Resource: "ciliuml2announcementpolicies"}
)

// MetalLB's annotation on a Service it gave an address (v0.14+), and the
// older prefix's.
var metallbAllocated = []string{"metallb.io/ip-allocated-from-pool", "metallb.universe.tf/ip-allocated-from-pool"}

// ciliumLeasePrefix names Cilium's per-Service L2 leases:
// cilium-l2announce-<namespace>-<service>.
const ciliumLeasePrefix = "cilium-l2announce-"

// Read takes one snapshot, cluster-wide. A resource whose kind is not
// installed reads as empty; any other error fails it.
func Read(ctx context.Context, cs kubernetes.Interface, dc dynamic.Interface, now time.Time) (Snapshot, error) {
	var s Snapshot
	svcs, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("listing Services: %w", err)
	}
	s.MetalLB.Allocated = map[string]string{}
	var keys []string
	for _, svc := range svcs.Items {
		k := svc.Namespace + "/" + svc.Name
		keys = append(keys, k)
		for _, a := range metallbAllocated {
			if p := svc.Annotations[a]; p != "" && svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
				s.MetalLB.Allocated[k] = p
			}
		}
	}
	if err := readWorkloads(ctx, cs, &s); err != nil {
		return s, err
	}
	if err := readPods(ctx, cs, &s); err != nil {
		return s, err
	}
	if err := readMetalLBObjects(ctx, dc, &s.MetalLB); err != nil {
		return s, err
	}
	if err := readCilium(ctx, cs, dc, keys, now, &s.Cilium); err != nil {
		return s, err
	}
	return s, nil
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

// Role says which part of MetalLB labels or an image name describe:
// "speaker", "controller" or "".
func Role(labels map[string]string, images ...string) string {
	for _, k := range [][2]string{{"app", "component"}, {"app.kubernetes.io/name", "app.kubernetes.io/component"}} {
		if labels[k[0]] == "metallb" {
			if c := labels[k[1]]; c == "speaker" || c == "controller" {
				return c
			}
		}
	}
	for _, im := range images {
		repo, _, _ := strings.Cut(im, "@")
		if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
			repo = repo[:i]
		}
		switch {
		case strings.HasSuffix(repo, "metallb/speaker"), strings.HasSuffix(repo, "metallb-speaker"):
			return "speaker"
		case strings.HasSuffix(repo, "metallb/controller"), strings.HasSuffix(repo, "metallb-controller"):
			return "controller"
		}
	}
	return ""
}

func images(spec *corev1.PodSpec) []string {
	var out []string
	for _, c := range spec.Containers {
		out = append(out, c.Image)
	}
	return out
}

// readWorkloads finds MetalLB's DaemonSets and Deployments (whatever their
// status).
func readWorkloads(ctx context.Context, cs kubernetes.Interface, s *Snapshot) error {
	dss, err := cs.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing DaemonSets: %w", err)
	}
	for i := range dss.Items {
		ds := &dss.Items[i]
		w := Workload{Kind: "DaemonSet", Namespace: ds.Namespace, Name: ds.Name}
		if Role(ds.Labels, images(&ds.Spec.Template.Spec)...) == "speaker" || Role(ds.Spec.Template.Labels) == "speaker" {
			s.MetalLB.SpeakerSets = append(s.MetalLB.SpeakerSets, w)
		}
	}
	deps, err := cs.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Deployments: %w", err)
	}
	for i := range deps.Items {
		d := &deps.Items[i]
		if isMetalLBController(d) {
			s.MetalLB.ControllerSets = append(s.MetalLB.ControllerSets, Workload{Kind: "Deployment", Namespace: d.Namespace, Name: d.Name})
		}
	}
	return nil
}

func isMetalLBController(d *appsv1.Deployment) bool {
	return Role(d.Labels, images(&d.Spec.Template.Spec)...) == "controller" || Role(d.Spec.Template.Labels) == "controller"
}

// readPods finds what runs: MetalLB's speakers and controllers, kube-vip,
// k3s servicelb.
func readPods(ctx context.Context, cs kubernetes.Interface, s *Snapshot) error {
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Pods: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodPending {
			continue
		}
		w := Workload{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName}
		switch {
		case Role(p.Labels, images(&p.Spec)...) == "speaker":
			s.MetalLB.Speakers = append(s.MetalLB.Speakers, w)
		case Role(p.Labels, images(&p.Spec)...) == "controller":
			s.MetalLB.Controllers = append(s.MetalLB.Controllers, w)
		case strings.HasPrefix(p.Name, "svclb-"):
			if n := p.Labels["svccontroller.k3s.cattle.io/svcname"]; n != "" {
				ns := p.Labels["svccontroller.k3s.cattle.io/svcnamespace"]
				if ns == "" {
					ns = "default"
				}
				w.Service = ns + "/" + n
			}
			s.ServiceLB = append(s.ServiceLB, w)
		case strings.HasPrefix(p.Name, "kube-vip"):
			s.KubeVIP = append(s.KubeVIP, w)
		}
	}
	return nil
}

// readMetalLBObjects reads MetalLB's pools and ServiceL2Statuses.
func readMetalLBObjects(ctx context.Context, dc dynamic.Interface, m *MetalLBState) error {
	items, err := list(ctx, dc, GVRMetalLBPools)
	if err != nil {
		return err
	}
	for _, it := range items {
		p := Pool{Name: it.GetNamespace() + "/" + it.GetName()}
		addrs, _, _ := unstructured.NestedStringSlice(it.Object, "spec", "addresses")
		for _, a := range addrs {
			if r, ok := ParseRange(a); ok {
				p.Ranges = append(p.Ranges, r)
			}
		}
		m.Pools = append(m.Pools, p)
	}
	if items, err = list(ctx, dc, GVRMetalLBL2Status); err != nil {
		return err
	}
	m.Announcers = map[string]L2Status{}
	for _, it := range items {
		node, _, _ := unstructured.NestedString(it.Object, "status", "node")
		name, _, _ := unstructured.NestedString(it.Object, "status", "serviceName")
		ns, _, _ := unstructured.NestedString(it.Object, "status", "serviceNamespace")
		l := it.GetLabels()
		node, name, ns = orElse(node, l["metallb.io/node"]), orElse(name, l["metallb.io/service-name"]), orElse(ns, l["metallb.io/service-namespace"])
		if node == "" || name == "" {
			continue
		}
		st := L2Status{Node: node, Object: it.GetNamespace() + "/" + it.GetName()}
		ifs, _, _ := unstructured.NestedSlice(it.Object, "status", "interfaces")
		for _, x := range ifs {
			if m, ok := x.(map[string]any); ok {
				if n, ok := m["name"].(string); ok && n != "" {
					st.Interfaces = append(st.Interfaces, n)
				}
			}
		}
		m.Announcers[ns+"/"+name] = st
	}
	return nil
}

func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ParseRange reads a MetalLB address: a CIDR or "first-last".
func ParseRange(s string) (Range, bool) {
	s = strings.TrimSpace(s)
	if first, last, ok := strings.Cut(s, "-"); ok {
		a, err1 := netip.ParseAddr(strings.TrimSpace(first))
		b, err2 := netip.ParseAddr(strings.TrimSpace(last))
		if err1 != nil || err2 != nil || a.Is4() != b.Is4() || b.Less(a) {
			return Range{}, false
		}
		return Range{a.Unmap(), b.Unmap()}, true
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return Range{}, false
	}
	p = p.Masked()
	return Range{p.Addr(), LastOf(p)}, true
}

// LastOf is the last address of p.
func LastOf(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// readCilium reads Cilium's L2 policies and per-Service leases.
func readCilium(ctx context.Context, cs kubernetes.Interface, dc dynamic.Interface, svcs []string, now time.Time, c *CiliumState) error {
	items, err := list(ctx, dc, GVRCiliumL2)
	if err != nil {
		return err
	}
	for _, it := range items {
		c.Policies = append(c.Policies, it.GetName())
	}
	leases, err := cs.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Leases: %w", err)
	}
	c.Leases = map[string]Lease{}
	for _, l := range leases.Items {
		rest, ok := strings.CutPrefix(l.Name, ciliumLeasePrefix)
		if !ok {
			continue
		}
		ls := Lease{Namespace: l.Namespace, Name: l.Name}
		if l.Spec.HolderIdentity != nil {
			ls.Holder = *l.Spec.HolderIdentity
		}
		if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil {
			ls.Fresh = now.Sub(l.Spec.RenewTime.Time) <= time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second
		}
		i := slices.IndexFunc(svcs, func(k string) bool { return strings.Replace(k, "/", "-", 1) == rest })
		if i < 0 {
			c.Unmatched = append(c.Unmatched, ls)
			continue
		}
		c.Leases[svcs[i]] = ls
	}
	return nil
}
