package controller

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lbipam"
	"github.com/mooringlb/mooring/internal/testenv"
)

// wantRules is the whole least-privilege role: an extra verb or resource
// in the generated role.yaml fails TestRoleIsMinimal, a missing one fails
// TestRunsWithServiceAccountCredentials.
var wantRules = map[string][]string{
	"/namespaces":                               {"list", "watch"},
	"/nodes":                                    {"list", "watch"}, // pool subnet condition
	"mooring.dev/l2announcementpolicies":        {"list", "watch"}, // pool subnet condition
	"mooring.dev/l2announcers":                  {"list", "watch"}, // pool subnet condition
	"/services":                                 {"list", "watch"},
	"/services/status":                          {"patch"},
	"events.k8s.io/events":                      {"create", "patch"},
	"mooring.dev/loadbalancerippools":           {"list", "watch"},
	"mooring.dev/loadbalancerippools/status":    {"patch"},
	"coordination.k8s.io/leases@mooring-system": {"create", "get", "update"},
	"/events@mooring-system":                    {"create", "patch"},
}

func TestRoleIsMinimal(t *testing.T) {
	got := map[string][]string{}
	for _, obj := range manifests(t, "config/rbac/controller/role.yaml") {
		var rules []rbacv1.PolicyRule
		switch obj.GetKind() {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			fromUnstructured(t, obj, &r)
			rules = r.Rules
		case "Role":
			var r rbacv1.Role
			fromUnstructured(t, obj, &r)
			rules = r.Rules
		}
		for _, r := range rules {
			if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
				t.Errorf("unexpected rule %+v", r)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					key := g + "/" + res
					if obj.GetNamespace() != "" {
						key += "@" + obj.GetNamespace()
					}
					got[key] = sorted(append(got[key], r.Verbs...))
				}
			}
		}
	}
	for k, v := range wantRules {
		if !slices.Equal(got[k], sorted(v)) {
			t.Errorf("%s: verbs %v, want %v", k, got[k], sorted(v))
		}
	}
	for k := range got {
		if _, ok := wantRules[k]; !ok {
			t.Errorf("excess permission: %s %v", k, got[k])
		}
	}
}

// TestRunsWithServiceAccountCredentials applies config/rbac/controller and
// the ServiceAccount, then runs the controller with a token of that
// ServiceAccount: every path (caches, status patches, events, lease) must
// work with exactly those permissions.
func TestRunsWithServiceAccountCredentials(t *testing.T) {
	env := startEnv(t)
	c := env.Client
	// The Deployment is applied too, so the API validates it (nothing runs
	// pods here).
	for _, f := range []string{"config/controller/namespace.yaml", "config/controller/service_account.yaml",
		"config/rbac/controller/role.yaml", "config/rbac/controller/role_binding.yaml", "config/controller/deployment.yaml"} {
		for _, obj := range manifests(t, f) {
			if err := c.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("apply %s %s: %v", f, obj.GetName(), err)
			}
		}
	}
	tok, err := env.Clientset.CoreV1().ServiceAccounts(DefaultLeaseNamespace).CreateToken(context.Background(),
		"mooring-controller", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrInt64(3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saConfig := &rest.Config{Host: env.Config.Host, BearerToken: tok.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}}
	mkNamespace(t, c, "sa", nil)
	create(t, c, lbService("sa", "web"))
	run := startController(t, saConfig)
	// Pending first, so the Warning and the later Normal Event are written
	// with the ServiceAccount's own credentials too.
	pending(t, env, "sa", "web", string(lbipam.ReasonNoPoolMatches))
	create(t, c, nsPool("sa", "", "100.67.0.0/24"))

	waitIPs(t, c, "sa", "web", "100.67.0.1")
	waitCondition(t, c, "sa", "web", mooringv1.ConditionAddressAssigned, ReasonAddressAssigned)
	waitEvent(t, env.Clientset, "sa", "web", ReasonAddressAssigned)
	eventually(t, 20*time.Second, func() string {
		var p mooringv1.LoadBalancerIPPool
		_ = c.Get(context.Background(), types.NamespacedName{Name: "sa"}, &p)
		if meta.IsStatusConditionTrue(p.Status.Conditions, mooringv1.ConditionReady) && p.Status.IPv4 != nil && p.Status.IPv4.Used == "1" {
			return ""
		}
		return "pool status not written: " + condString(p.Status.Conditions)
	})
	var lease coordinationv1.Lease
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: DefaultLeaseNamespace, Name: DefaultLeaseName}, &lease); err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("lease has no holder: %+v", lease.Spec)
	}
	// A later request still works (watch permissions, not only list).
	create(t, c, lbService("sa", "later"))
	waitIPs(t, c, "sa", "later", "100.67.0.2")
	run.stop() // leader election's "stopped leading" Event needs its permission too
	if logs := run.logs.String(); strings.Contains(logs, "forbidden") {
		t.Errorf("the controller was refused a request with its own role:\n%s", logs)
	}
}

func ptrInt64(v int64) *int64 { return &v }

// manifests reads a multi-document YAML file of the repository.
func manifests(t testing.TB, rel string) []*unstructured.Unstructured {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(b), "\n---") {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
	return out
}

func fromUnstructured(t testing.TB, u *unstructured.Unstructured, into any) {
	t.Helper()
	b, err := yaml.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatal(err)
	}
}
