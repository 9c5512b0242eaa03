// Package cluster is the Kubernetes side of `mooring migrate metallb`: it
// finds MetalLB's pieces, records every Service's addresses, performs the
// steps of migrate.Plan and runs the checks between them.
package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/migrate"
)

// Snapshot is every LoadBalancer Service's addresses, by namespace/name.
type Snapshot map[string][]netip.Addr

// TakeSnapshot records the addresses.
func TakeSnapshot(ctx context.Context, cs kubernetes.Interface) (Snapshot, error) {
	l, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Services: %w", err)
	}
	out := Snapshot{}
	for _, s := range l.Items {
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
			out[s.Namespace+"/"+s.Name] = ingress(&s)
		}
	}
	return out, nil
}

func ingress(s *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, in := range s.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// Lines renders the snapshot as "namespace/name=addr,addr", sorted.
func (s Snapshot) Lines() []string {
	var out []string
	for k, as := range s {
		var xs []string
		for _, a := range as {
			xs = append(xs, a.String())
		}
		out = append(out, k+"="+strings.Join(xs, ","))
	}
	sort.Strings(out)
	return out
}

// Addrs is every recorded address.
func (s Snapshot) Addrs() []netip.Addr {
	var out []netip.Addr
	for _, as := range s {
		out = append(out, as...)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// FindMetalLB fills the MetalLB parts of f: speakers, controllers and
// webhooks, by the names and labels MetalLB's manifests and chart use.
func FindMetalLB(ctx context.Context, cs kubernetes.Interface, f *migrate.Facts) error {
	ns := f.MetalLBNamespace
	dss, err := cs.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing DaemonSets in %s: %w", ns, err)
	}
	for _, d := range dss.Items {
		if d.Labels["component"] == "speaker" || d.Labels["app.kubernetes.io/component"] == "speaker" || strings.Contains(d.Name, "speaker") {
			f.Speakers = append(f.Speakers, d.Name)
		}
	}
	deps, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Deployments in %s: %w", ns, err)
	}
	for _, d := range deps.Items {
		if d.Labels["component"] == "controller" || d.Labels["app.kubernetes.io/component"] == "controller" || strings.Contains(d.Name, "controller") {
			f.Controllers = append(f.Controllers, d.Name)
		}
	}
	whs, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing ValidatingWebhookConfigurations: %w", err)
	}
	for _, w := range whs.Items {
		if isMetalLBWebhook(&w, ns) {
			f.Webhooks = append(f.Webhooks, w.Name)
		}
	}
	if len(f.Speakers) == 0 && len(f.Controllers) == 0 {
		return fmt.Errorf("no MetalLB speaker DaemonSet or controller Deployment in namespace %s: pass --metallb-namespace", ns)
	}
	return nil
}

func isMetalLBWebhook(w *admissionv1.ValidatingWebhookConfiguration, ns string) bool {
	if strings.Contains(w.Name, "metallb") {
		return true
	}
	for _, h := range w.Webhooks {
		if h.ClientConfig.Service != nil && h.ClientConfig.Service.Namespace == ns {
			return true
		}
	}
	return false
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
