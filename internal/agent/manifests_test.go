package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/mooringlb/mooring/internal/testenv"
)

func readManifest(t *testing.T, rel string, into any) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

// The role is least privilege: exactly these verbs on exactly these
// resources. The e2e tests run every agent with this role's token, which
// shows it is also enough.
func TestAgentRoleIsExact(t *testing.T) {
	got := roleRules(t, "config/rbac/agent/role.yaml")
	want := map[string][]string{
		"/events":                            {"create"},        // Events on moves and safety findings
		"/nodes":                             {"list", "watch"}, // labels and gossip peers
		"/services":                          {"list", "watch"}, // read only: agents never write Services
		"discovery.k8s.io/endpointslices":    {"list", "watch"}, // externalTrafficPolicy: Local
		"mooring.dev/l2announcementpolicies": {"list", "watch"},
		"mooring.dev/l2announcementpolicies/status": {"patch"},                          // conditions, by the status writer only
		"mooring.dev/l2announcers":                  {"create", "get", "list", "watch"}, // writes: its own node's only (admission policy); read: partition.go
		"mooring.dev/l2announcers/status":           {"update"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ClusterRole mooring-agent grants\n%v\nwant exactly\n%v", got, want)
	}
	// Fast eviction's own role, bound only with the flag on.
	got = roleRules(t, "config/rbac/agent-eviction/role.yaml")
	want = map[string][]string{
		"/pods":        {"list"},  // one dead node's pods, by the decider only
		"/pods/status": {"patch"}, // Ready=False only, lost nodes' only (admissionpolicy-pods.yaml, -eviction.yaml)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ClusterRole mooring-agent-eviction grants\n%v\nwant exactly\n%v", got, want)
	}
}

func roleRules(t *testing.T, path string) map[string][]string {
	t.Helper()
	var role rbacv1.ClusterRole
	readManifest(t, path, &role)
	got := map[string][]string{}
	for _, r := range role.Rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Fatalf("unexpected rule %+v", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				k := g + "/" + res
				got[k] = append(got[k], r.Verbs...)
				slices.Sort(got[k])
			}
		}
	}
	return got
}

// The DaemonSet runs in the node's network namespace with its own
// ServiceAccount and only NET_RAW and NET_ADMIN.
func TestDaemonSetManifest(t *testing.T) {
	var ds appsv1.DaemonSet
	readManifest(t, "config/agent/daemonset.yaml", &ds)
	var sa corev1.ServiceAccount
	readManifest(t, "config/agent/serviceaccount.yaml", &sa)
	var binding rbacv1.ClusterRoleBinding
	readManifest(t, "config/agent/clusterrolebinding.yaml", &binding)

	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.ServiceAccountName != sa.Name || len(spec.Containers) != 1 {
		t.Fatalf("hostNetwork %v, serviceAccountName %q (want %q), %d containers", spec.HostNetwork, spec.ServiceAccountName, sa.Name, len(spec.Containers))
	}
	if s := binding.Subjects; len(s) != 1 || s[0].Name != sa.Name || s[0].Namespace != sa.Namespace || binding.RoleRef.Name != "mooring-agent" {
		t.Fatalf("binding %+v does not bind %s/%s to mooring-agent", binding, sa.Namespace, sa.Name)
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("no securityContext.capabilities")
	}
	if add := sc.Capabilities.Add; !reflect.DeepEqual(add, []corev1.Capability{"NET_RAW", "NET_ADMIN"}) {
		t.Fatalf("capabilities added %v, want only NET_RAW and NET_ADMIN", add)
	}
	if drop := sc.Capabilities.Drop; !reflect.DeepEqual(drop, []corev1.Capability{"ALL"}) {
		t.Fatalf("capabilities dropped %v, want ALL", drop)
	}
	if sc.Privileged != nil && *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Fatal("the agent must not be privileged nor allow privilege escalation")
	}
	if len(c.Args) == 0 || c.Args[0] != "agent" {
		t.Fatalf("args %v", c.Args)
	}
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "NODE_NAME" }); i < 0 ||
		c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil || c.Env[i].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Fatal("NODE_NAME must come from spec.nodeName")
	}
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "HOST_IP" }); i < 0 ||
		c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil || c.Env[i].ValueFrom.FieldRef.FieldPath != "status.hostIP" ||
		!slices.Contains(c.Args, "--gossip-bind-address=$(HOST_IP)") {
		t.Fatal("gossip must bind the node's own address: HOST_IP from status.hostIP, --gossip-bind-address=$(HOST_IP)")
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Fatal("the agent's readiness probe must read /readyz")
	}
}
