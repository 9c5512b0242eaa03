package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Leftover is one object MetalLB's removal left behind, with the command
// that removes it.
type Leftover struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Command   string `json:"command"`
	// Note says why it matters or what else the command removes.
	Note string `json:"note,omitempty"`
}

// String is "Kind namespace/name".
func (l Leftover) String() string {
	if l.Namespace == "" {
		return l.Kind + " " + l.Name
	}
	return l.Kind + " " + l.Namespace + "/" + l.Name
}

var gvrCRDs = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// metallbGroup is the API group of MetalLB's custom resources.
const metallbGroup = "metallb.io"

// Leftovers lists what of MetalLB is still in the cluster once its
// workloads are gone, in the order to remove it: webhook configurations
// first (one without a backend blocks deleting MetalLB's custom
// resources), the custom resources, their CRDs, MetalLB's cluster-wide
// RBAC, then the objects in its namespace (ns) and the namespace itself.
func Leftovers(ctx context.Context, cs kubernetes.Interface, dc dynamic.Interface, ns string) ([]Leftover, error) {
	out, err := webhookLeftovers(ctx, cs, ns)
	if err != nil {
		return nil, err
	}
	crs, crds, err := crdLeftovers(ctx, dc)
	if err != nil {
		return nil, err
	}
	out = append(append(out, crs...), crds...)
	rbac, err := rbacLeftovers(ctx, cs)
	if err != nil {
		return nil, err
	}
	out = append(out, rbac...)
	inNS, err := namespaceLeftovers(ctx, cs, ns)
	if err != nil {
		return nil, err
	}
	out = append(out, inNS...)
	anns, err := annotationLeftovers(ctx, cs)
	if err != nil {
		return nil, err
	}
	return append(out, anns...), nil
}

// metallbAnnotations are what MetalLB's controller writes on the Services
// it serves (the pool it allocated from), under both of its prefixes.
var metallbAnnotations = []string{"metallb.io/ip-allocated-from-pool", "metallb.universe.tf/ip-allocated-from-pool"}

// annotationLeftovers lists MetalLB's annotations still on Services:
// harmless, but they name a pool that no longer exists.
func annotationLeftovers(ctx context.Context, cs kubernetes.Interface) ([]Leftover, error) {
	svcs, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Services: %w", err)
	}
	var out []Leftover
	for _, s := range svcs.Items {
		for _, a := range metallbAnnotations {
			if _, ok := s.Annotations[a]; ok {
				out = append(out, Leftover{Kind: "Service annotation " + a, Namespace: s.Namespace, Name: s.Name,
					Command: fmt.Sprintf("kubectl -n %s annotate service %s %s-", s.Namespace, s.Name, a),
					Note:    "names MetalLB's pool; Mooring does not read it"})
			}
		}
	}
	return out, nil
}

func webhookLeftovers(ctx context.Context, cs kubernetes.Interface, ns string) ([]Leftover, error) {
	var out []Leftover
	vw, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ValidatingWebhookConfigurations: %w", err)
	}
	for i := range vw.Items {
		if isMetalLBWebhook(&vw.Items[i], ns) {
			out = append(out, Leftover{Kind: "ValidatingWebhookConfiguration", Name: vw.Items[i].Name,
				Command: "kubectl delete validatingwebhookconfiguration " + vw.Items[i].Name,
				Note:    "first: without its backend it blocks deleting MetalLB's custom resources"})
		}
	}
	mw, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing MutatingWebhookConfigurations: %w", err)
	}
	for _, w := range mw.Items {
		svcNS := slices.ContainsFunc(w.Webhooks, func(h admissionv1.MutatingWebhook) bool {
			return h.ClientConfig.Service != nil && h.ClientConfig.Service.Namespace == ns
		})
		if strings.Contains(w.Name, "metallb") || svcNS {
			out = append(out, Leftover{Kind: "MutatingWebhookConfiguration", Name: w.Name, Command: "kubectl delete mutatingwebhookconfiguration " + w.Name})
		}
	}
	return out, nil
}

// crdLeftovers lists MetalLB's CRDs and the custom resources still stored
// under them.
func crdLeftovers(ctx context.Context, dc dynamic.Interface) (crs, crds []Leftover, err error) {
	l, err := dc.Resource(gvrCRDs).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing CustomResourceDefinitions: %w", err)
	}
	for _, c := range l.Items {
		group, _, _ := unstructured.NestedString(c.Object, "spec", "group")
		if group != metallbGroup {
			continue
		}
		plural, _, _ := unstructured.NestedString(c.Object, "spec", "names", "plural")
		crds = append(crds, Leftover{Kind: "CustomResourceDefinition", Name: c.GetName(), Command: "kubectl delete crd " + c.GetName(),
			Note: "deletes every " + plural + " object left"})
		version := servedVersion(&c)
		if version == "" {
			continue
		}
		objs, err := dc.Resource(schema.GroupVersionResource{Group: group, Version: version, Resource: plural}).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("listing %s.%s: %w", plural, group, err)
		}
		for _, o := range objs.Items {
			lo := Leftover{Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName()}
			lo.Command = "kubectl delete " + plural + "." + group + " " + o.GetName()
			if o.GetNamespace() != "" {
				lo.Command = "kubectl -n " + o.GetNamespace() + " delete " + plural + "." + group + " " + o.GetName()
			}
			crs = append(crs, lo)
		}
	}
	return crs, crds, nil
}

// servedVersion is the CRD's storage version when served, else a served
// one ("" when none): reading a deprecated version draws warnings.
func servedVersion(c *unstructured.Unstructured) string {
	vs, _, _ := unstructured.NestedSlice(c.Object, "spec", "versions")
	out := ""
	for _, v := range vs {
		m, ok := v.(map[string]any)
		if !ok {
			continue
		}
		n, _ := m["name"].(string)
		served, _ := m["served"].(bool)
		storage, _ := m["storage"].(bool)
		switch {
		case !served || n == "":
		case storage:
			return n
		case out == "":
			out = n
		}
	}
	return out
}

// rbacLeftovers lists MetalLB's ClusterRoles and ClusterRoleBindings (by
// name or MetalLB's labels).
func rbacLeftovers(ctx context.Context, cs kubernetes.Interface) ([]Leftover, error) {
	isMetalLB := func(name string, l map[string]string) bool {
		return strings.Contains(name, "metallb") || l["app"] == "metallb" || l["app.kubernetes.io/name"] == "metallb"
	}
	var out []Leftover
	crs, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ClusterRoles: %w", err)
	}
	for _, r := range crs.Items {
		if isMetalLB(r.Name, r.Labels) {
			out = append(out, Leftover{Kind: "ClusterRole", Name: r.Name, Command: "kubectl delete clusterrole " + r.Name})
		}
	}
	crbs, err := cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ClusterRoleBindings: %w", err)
	}
	for _, b := range crbs.Items {
		if isMetalLB(b.Name, b.Labels) {
			out = append(out, Leftover{Kind: "ClusterRoleBinding", Name: b.Name, Command: "kubectl delete clusterrolebinding " + b.Name})
		}
	}
	return out, nil
}

// namespaceLeftovers lists MetalLB's namespace and what is still in it: its
// Secrets (the memberlist key), ConfigMaps, ServiceAccounts, Roles and
// RoleBindings, each with its own command, then the namespace — whose
// deletion removes all of them — unless something else runs there.
func namespaceLeftovers(ctx context.Context, cs kubernetes.Interface, ns string) ([]Leftover, error) {
	n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading namespace %s: %w", ns, err)
	}
	if n.DeletionTimestamp != nil {
		return []Leftover{{Kind: "Namespace", Name: ns, Command: "kubectl get namespace " + ns + " -o yaml",
			Note: "being deleted (Terminating): if it stays, its status.conditions say what blocks it"}}, nil
	}
	var out []Leftover
	add := func(kind, res, name string) {
		out = append(out, Leftover{Kind: kind, Namespace: ns, Name: name, Command: fmt.Sprintf("kubectl -n %s delete %s %s", ns, res, name)})
	}
	secrets, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Secrets in %s: %w", ns, err)
	}
	for _, s := range secrets.Items {
		if s.Type != corev1.SecretTypeServiceAccountToken {
			add("Secret", "secret", s.Name)
		}
	}
	cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ConfigMaps in %s: %w", ns, err)
	}
	for _, c := range cms.Items {
		if c.Name != "kube-root-ca.crt" { // every namespace gets it
			add("ConfigMap", "configmap", c.Name)
		}
	}
	sas, err := cs.CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ServiceAccounts in %s: %w", ns, err)
	}
	for _, a := range sas.Items {
		if a.Name != "default" {
			add("ServiceAccount", "serviceaccount", a.Name)
		}
	}
	if err := roleLeftovers(ctx, cs, ns, add); err != nil {
		return nil, err
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Pods in %s: %w", ns, err)
	}
	if len(pods.Items) > 0 {
		return out, nil // something else runs there: keep the namespace
	}
	return append(out, Leftover{Kind: "Namespace", Name: ns, Command: "kubectl delete namespace " + ns,
		Note: "removes everything above that is in it at once"}), nil
}

func roleLeftovers(ctx context.Context, cs kubernetes.Interface, ns string, add func(kind, res, name string)) error {
	roles, err := cs.RbacV1().Roles(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Roles in %s: %w", ns, err)
	}
	for _, r := range roles.Items {
		add("Role", "role", r.Name)
	}
	rbs, err := cs.RbacV1().RoleBindings(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing RoleBindings in %s: %w", ns, err)
	}
	for _, b := range rbs.Items {
		add("RoleBinding", "rolebinding", b.Name)
	}
	return nil
}
