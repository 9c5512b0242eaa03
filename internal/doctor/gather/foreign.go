package gather

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/doctor"
)

// foreign finds other load-balancer implementations by the names and
// labels their installers use.
func foreign(ctx context.Context, cs kubernetes.Interface, dc dynamic.Interface, svcs []doctor.Service) (doctor.Foreign, error) {
	var f doctor.Foreign
	dss, err := cs.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return f, fmt.Errorf("listing DaemonSets: %w", err)
	}
	for _, ds := range dss.Items {
		w := doctor.Workload{Kind: "DaemonSet", Namespace: ds.Namespace, Name: ds.Name}
		if ds.Status.DesiredNumberScheduled == 0 && ds.Status.NumberReady == 0 {
			continue // scheduled nowhere (e.g. scaled away with a nodeSelector matching nothing)
		}
		switch {
		case isMetalLBSpeaker(ds.Name, ds.Labels):
			f.MetalLBSpeakers = append(f.MetalLBSpeakers, w)
		case strings.HasPrefix(ds.Name, "kube-vip"):
			f.KubeVIP = append(f.KubeVIP, w)
		}
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return f, fmt.Errorf("listing Pods: %w", err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodPending {
			continue
		}
		w := doctor.Workload{Kind: "Pod", Namespace: p.Namespace, Name: p.Name}
		switch {
		case strings.HasPrefix(p.Name, "svclb-"):
			if n := p.Labels["svccontroller.k3s.cattle.io/svcname"]; n != "" {
				ns := p.Labels["svccontroller.k3s.cattle.io/svcnamespace"]
				if ns == "" {
					ns = "default"
				}
				w.Service = ns + "/" + n
			}
			f.ServiceLB = append(f.ServiceLB, w)
		case strings.HasPrefix(p.Name, "kube-vip") && len(p.OwnerReferences) == 0: // static pod
			f.KubeVIP = append(f.KubeVIP, w)
		}
	}
	items, err := list(ctx, dc, gvrMetalLB)
	if err != nil {
		return f, err
	}
	for _, it := range items {
		addrs, _, _ := unstructuredStrings(it.Object, "spec", "addresses")
		p := doctor.Pool{Name: it.GetNamespace() + "/" + it.GetName()}
		for _, a := range addrs {
			if s, e, ok := strings.Cut(a, "-"); ok {
				if r, ok := blockRange("", s, e); ok {
					p.Ranges = append(p.Ranges, r)
				}
			} else if r, ok := blockRange(a, "", ""); ok {
				p.Ranges = append(p.Ranges, r)
			}
		}
		f.MetalLBPools = append(f.MetalLBPools, p)
	}
	if items, err = list(ctx, dc, gvrCiliumL2); err != nil {
		return f, err
	}
	for _, it := range items {
		f.CiliumL2Policies = append(f.CiliumL2Policies, it.GetName())
	}
	leases, err := cs.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return f, fmt.Errorf("listing Leases: %w", err)
	}
	for _, l := range leases.Items {
		if !strings.HasPrefix(l.Name, "cilium-l2announce-") {
			continue
		}
		w := doctor.Workload{Kind: "Lease", Namespace: l.Namespace, Name: l.Name}
		for _, s := range svcs {
			if l.Name == "cilium-l2announce-"+s.Namespace+"-"+s.Name {
				w.Service = s.Key()
			}
		}
		f.CiliumLeases = append(f.CiliumLeases, w)
	}
	return f, nil
}

func isMetalLBSpeaker(name string, l map[string]string) bool {
	switch {
	case l["app"] == "metallb" && l["component"] == "speaker":
		return true
	case l["app.kubernetes.io/name"] == "metallb" && l["app.kubernetes.io/component"] == "speaker":
		return true
	}
	return strings.Contains(name, "metallb") && strings.Contains(name, "speaker")
}

func unstructuredStrings(obj map[string]any, path ...string) ([]string, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[p]
	}
	xs, ok := cur.([]any)
	if !ok {
		return nil, false, nil
	}
	var out []string
	for _, x := range xs {
		if s, ok := x.(string); ok {
			out = append(out, strings.TrimSpace(s))
		}
	}
	return out, true, nil
}
