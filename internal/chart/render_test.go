package chart

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func TestLint(t *testing.T) {
	for _, vs := range valueSets(t) {
		t.Run(filepath.Base(vs), func(t *testing.T) {
			out, err := helm(t, "lint", "--strict", Dir, "-f", vs)
			if err != nil {
				t.Fatalf("helm lint --strict -f %s:\n%s\n%v", vs, out, err)
			}
			if strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") {
				t.Errorf("helm lint -f %s:\n%s", vs, out)
			}
		})
	}
}

func container(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("%s %s: %d containers, want 1", o.GetKind(), o.GetName(), len(cs))
	}
	return cs[0].(map[string]any)
}

func str(o map[string]any, path ...string) string {
	s, _, _ := unstructured.NestedString(o, path...)
	return s
}

// num reads a number of a decoded object (JSON numbers are float64).
func num(o map[string]any, path ...string) float64 {
	v, _, _ := unstructured.NestedFieldNoCopy(o, path...)
	f, _ := v.(float64)
	return f
}

// The defaults: what the issue asks of a least-privilege install.
func TestDefaults(t *testing.T) {
	objs := render(t, "--set", "agent.gossipKey.value="+testKey)

	d := find(t, objs, "Deployment", "mooring-controller")
	if r := num(d.Object, "spec", "replicas"); r != 2 {
		t.Errorf("controller replicas %v, want 2", r)
	}
	if pc := str(d.Object, "spec", "template", "spec", "priorityClassName"); pc != "system-cluster-critical" {
		t.Errorf("controller priorityClassName %q", pc)
	}
	pdb := find(t, objs, "PodDisruptionBudget", "mooring-controller")
	if m := num(pdb.Object, "spec", "minAvailable"); m != 1 {
		t.Errorf("PDB minAvailable %v, want 1", m)
	}
	c := container(t, d)
	if img := c["image"]; img != "ghcr.io/mooringlb/mooring:v0.1.0" {
		t.Errorf("controller image %v, want the appVersion tag", img)
	}
	if n, _, _ := unstructured.NestedBool(d.Object, "spec", "template", "spec", "securityContext", "runAsNonRoot"); !n {
		t.Error("controller must run as non-root")
	}

	ds := find(t, objs, "DaemonSet", "mooring-agent")
	spec, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
	if spec["hostNetwork"] != true || spec["priorityClassName"] != "system-node-critical" {
		t.Errorf("agent hostNetwork %v, priorityClassName %v", spec["hostNetwork"], spec["priorityClassName"])
	}
	sc := container(t, ds)["securityContext"].(map[string]any)
	caps := sc["capabilities"].(map[string]any)
	if !reflect.DeepEqual(caps["drop"], []any{"ALL"}) || !reflect.DeepEqual(caps["add"], []any{"NET_RAW", "NET_ADMIN"}) {
		t.Errorf("agent capabilities %v, want drop ALL, add NET_RAW NET_ADMIN", caps)
	}
	if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false {
		t.Errorf("agent securityContext %v", sc)
	}
	// The agent's key file format: one base64 key per line.
	sec := find(t, objs, "Secret", "mooring-gossip-key")
	if k := str(sec.Object, "data", "keys"); k != base64.StdEncoding.EncodeToString([]byte(testKey+"\n")) {
		t.Errorf("gossip key Secret holds %q", k)
	}
	args := fmt.Sprint(container(t, ds)["args"])
	if !strings.Contains(args, "--gossip-key-file=/etc/mooring/gossip/keys") || !strings.Contains(args, "--gossip-bind-address=$(HOST_IP)") {
		t.Errorf("agent args %s: want the mounted key file and the node's address", args)
	}
	vols, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "volumes")
	vols = withoutAgentState(t, vols)
	if len(vols) != 1 || str(vols[0].(map[string]any), "secret", "secretName") != "mooring-gossip-key" {
		t.Errorf("agent volumes %v, want the gossip key Secret", vols)
	}
	if len(ofKind(objs, "PodMonitor"))+len(ofKind(objs, "ServiceMonitor")) != 0 {
		t.Error("monitors are opt-in")
	}
	for _, v := range vols {
		if _, ok := v.(map[string]any)["hostPath"]; ok {
			t.Errorf("pod IPAM is off by default: no host folders, got %v", v)
		}
	}
	for _, crd := range ofKind(objs, "CustomResourceDefinition") {
		if crd.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s lacks helm.sh/resource-policy: keep", crd.GetName())
		}
	}
}

// Non-default values reach the objects: digest, names, lease namespace,
// existing Secret, monitors, disabled endpoints.
func TestCustomValues(t *testing.T) {
	objs := render(t, "-f", filepath.Join(Dir, "ci", "custom-values.yaml"))
	d := find(t, objs, "Deployment", "lb-controller")
	const img = "registry.example.com/mooring@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	if got := container(t, d)["image"]; got != img {
		t.Errorf("image %v, want %s (by digest)", got, img)
	}
	if got := container(t, find(t, objs, "DaemonSet", "lb-agent"))["image"]; got != img {
		t.Errorf("agent image %v, want %s", got, img)
	}
	if sa := str(d.Object, "spec", "template", "spec", "serviceAccountName"); sa != "lb-ipam" {
		t.Errorf("controller ServiceAccount %q", sa)
	}
	role := find(t, objs, "Role", "lb-controller")
	if role.GetNamespace() != "mooring-leases" {
		t.Errorf("the lease Role is in %q, want the lease namespace", role.GetNamespace())
	}
	if _, ok := container(t, d)["ports"].([]any); !ok {
		t.Error("controller health port missing")
	}
	for _, p := range container(t, d)["ports"].([]any) {
		if p.(map[string]any)["name"] == "metrics" {
			t.Error("metricsAddr \"0\" must drop the metrics port")
		}
	}
	if len(ofKind(objs, "Secret")) != 0 {
		t.Error("with existingSecret the chart must not create a Secret")
	}
	// Pod IPAM on: the agents get the host folders of the socket and state,
	// and the CNI plugin folder the init container installs mooring-ipam in.
	agent := find(t, objs, "DaemonSet", "lb-agent")
	vols, _, _ := unstructured.NestedSlice(agent.Object, "spec", "template", "spec", "volumes")
	var hostPaths []string
	for _, v := range vols {
		if p := str(v.(map[string]any), "hostPath", "path"); p != "" {
			hostPaths = append(hostPaths, p)
		}
	}
	if fmt.Sprint(hostPaths) != "[/run/mooring /var/lib/mooring-ipam /opt/cni/bin /var/lib/mooring/agent]" {
		t.Errorf("pod IPAM host folders %v", hostPaths)
	}
	args := fmt.Sprint(container(t, d)["args"])
	if !strings.Contains(args, "--cluster-pool-ipv4-cidr=10.244.0.0/16") || !strings.Contains(args, "--pod-ipam-mode=cluster-pool") {
		t.Errorf("controller args %s", args)
	}
	// The agents read the mode where the controller records it: its lease
	// namespace (the pod IPAM Roles are there too).
	if a := fmt.Sprint(container(t, agent)["args"]); !strings.Contains(a, "--pod-ipam-namespace=mooring-leases") {
		t.Errorf("agent args %s: want --pod-ipam-namespace=mooring-leases, the controller's lease namespace", a)
	}
	if r := find(t, objs, "Role", "lb-agent-pod-ipam"); r.GetNamespace() != "mooring-leases" {
		t.Errorf("the agent's pod IPAM Role is in %q, want mooring-leases", r.GetNamespace())
	}
	vap := find(t, objs, "ValidatingAdmissionPolicy", "lb-agent-own-node")
	if m := fmt.Sprint(vap.Object["spec"]); !strings.Contains(m, `"system:serviceaccount:mooring-system:lb-agent"`) {
		t.Errorf("the own-node policy does not match this release's agent: %s", m)
	}
	// Fast endpoint eviction: the flags, and the policy that narrows the
	// agent's pods/status writes, for this release's agent.
	if a := fmt.Sprint(container(t, agent)["args"]); !strings.Contains(a, "--fast-endpoint-eviction=true") || !strings.Contains(a, "--fast-eviction-max-share=0.25") {
		t.Errorf("agent args %s", a)
	}
	podVAP := find(t, objs, "ValidatingAdmissionPolicy", "lb-agent-pod-readiness")
	if m := fmt.Sprint(podVAP.Object["spec"]); !strings.Contains(m, `"system:serviceaccount:mooring-system:lb-agent"`) || !strings.Contains(m, "MooringNodeUnreachable") {
		t.Errorf("the pod readiness policy does not match this release's agent: %s", m)
	}
	find(t, objs, "ValidatingAdmissionPolicyBinding", "lb-agent-pod-readiness")
	evictVAP := find(t, objs, "ValidatingAdmissionPolicy", "lb-agent-eviction")
	if m := fmt.Sprint(evictVAP.Object["spec"]); !strings.Contains(m, `"system:serviceaccount:mooring-system:lb-agent"`) || !strings.Contains(m, "variables.podNode != variables.node") ||
		!strings.Contains(m, "failurePolicy:Fail") || strings.Contains(m, "paramKind") {
		t.Errorf("the eviction policy does not keep this release's agent off its own node (no params, failing closed): %s", m)
	}
	find(t, objs, "ValidatingAdmissionPolicyBinding", "lb-agent-eviction")
	lostVAP := find(t, objs, "ValidatingAdmissionPolicy", "lb-agent-eviction-lost")
	// Ignore: a param binding is configured before matchConditions, so a
	// Fail policy refused every pods/status update (kubelets' too) until
	// the API server had synced the L2Announcer kind.
	if m := fmt.Sprint(lostVAP.Object["spec"]); !strings.Contains(m, `"system:serviceaccount:mooring-system:lb-agent"`) || !strings.Contains(m, "params.status.lost") || !strings.Contains(m, "failurePolicy:Ignore") {
		t.Errorf("the eviction policy does not bound this release's agent by its status.lost (ignoring an unsynced param kind): %s", m)
	}
	if m := fmt.Sprint(find(t, objs, "ValidatingAdmissionPolicyBinding", "lb-agent-eviction-lost").Object["spec"]); !strings.Contains(m, "paramRef") {
		t.Errorf("the eviction policy's binding has no paramRef (every L2Announcer): %s", m)
	}
	if len(ofKind(objs, "PodMonitor")) != 1 || len(ofKind(objs, "ServiceMonitor")) != 1 {
		t.Errorf("want one PodMonitor and one ServiceMonitor (agent only: controller metrics are off), got %d and %d",
			len(ofKind(objs, "PodMonitor")), len(ofKind(objs, "ServiceMonitor")))
	}
	for _, crd := range ofKind(objs, "CustomResourceDefinition") {
		if _, ok := crd.GetAnnotations()["helm.sh/resource-policy"]; ok {
			t.Errorf("crds.keep=false: CRD %s still has the keep policy", crd.GetName())
		}
	}
}

// The agent never renders without a gossip key unless the user opts out.
func TestGossipKeyRequired(t *testing.T) {
	_, err := helm(t, "template", "mooring", Dir)
	if err == nil || !strings.Contains(err.Error(), "agent.gossipKey") || !strings.Contains(err.Error(), "insecureNoKey") {
		t.Fatalf("rendering without a key: err %v, want one naming agent.gossipKey and the opt-out", err)
	}
	if _, err := helm(t, "template", "mooring", Dir, "--set", "agent.gossipKey.value="+testKey, "--set", "agent.gossipKey.existingSecret=x"); err == nil {
		t.Error("value and existingSecret together must be refused")
	}
	objs := render(t, "--set", "agent.gossipKey.insecureNoKey=true")
	ds := find(t, objs, "DaemonSet", "mooring-agent")
	if v, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "volumes"); len(withoutAgentState(t, v)) != 0 {
		t.Errorf("insecureNoKey: volumes %v, want none", v)
	}
	// The agent refuses to gossip without a key unless told: the opt-out
	// must reach it as --insecure-gossip, or its pods crash-loop.
	if args := fmt.Sprint(container(t, ds)["args"]); !strings.Contains(args, "--insecure-gossip=true") || strings.Contains(args, "--gossip-key-file") {
		t.Errorf("insecureNoKey: agent args %s, want --insecure-gossip and no key file", args)
	}
	render(t, "--set", "agent.enabled=false")
}

// values.schema.json refuses bad values, and the message names each one
// (Helm reports every schema violation at once, so one render checks all).
func TestSchemaRefusesInvalidValues(t *testing.T) {
	bad := map[string]string{
		"controller.flags.workers=0":               "/controller/flags/workers",
		"controller.flags.noSuchFlag=1":            "noSuchFlag",
		"controller.flags.leaseDuration=soon":      "/controller/flags/leaseDuration",
		"controller.flags.defaultClass=maybe":      "/controller/flags/defaultClass",
		"controller.flags.podIpamMode=sometimes":   "/controller/flags/podIpamMode",
		"controller.replicas=0":                    "/controller/replicas",
		"agent.flags.gossipPort=70000":             "/agent/flags/gossipPort",
		"agent.flags.metricsAddr=9473":             "/agent/flags/metricsAddr",
		"agent.flags.logLevel=verbose":             "/agent/flags/logLevel",
		"agent.gossipKey.value=tooshort":           "/agent/gossipKey/value",
		"image.digest=latest":                      "/image/digest",
		"image.pullPolicy=Sometimes":               "/image/pullPolicy",
		"prometheus.podMonitor.interval=every-30s": "/prometheus/podMonitor/interval",
	}
	args := []string{"template", "mooring", Dir}
	for set := range bad {
		args = append(args, "--set", set)
	}
	_, err := helm(t, args...)
	if err == nil {
		t.Fatal("invalid values rendered")
	}
	for set, name := range bad {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("--set %s: the refusal does not name %s:\n%v", set, name, err)
		}
	}
	// One at a time, too: each alone is refused.
	if _, err := helm(t, "template", "mooring", Dir, "--set", "agent.gossipKey.value="+testKey, "--set", "controller.flags.workers=0"); err == nil {
		t.Error("controller.flags.workers=0 alone rendered")
	}
}

// rbacDocs reads a controller-gen role.yaml: kind/name -> rules.
func rbacDocs(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(m) > 0 {
			out[m["kind"].(string)] = m["rules"]
		}
	}
	return out
}

// The chart's roles are config/rbac's (controller-gen's output of the
// +kubebuilder:rbac markers), rule for rule, every one of them with every
// feature on; the pod IPAM roles only when pod IPAM is on, the eviction
// role only with fast endpoint eviction, the BGP role only with
// agent.flags.bgp (its Secret Role in the release namespace).
func TestRBACIsConfigRBAC(t *testing.T) {
	objs := render(t, "--set", "agent.gossipKey.value="+testKey, "--set", "controller.flags.podIpamMode=multi-pool",
		"--set", "agent.flags.fastEndpointEviction=true", "--set", "agent.flags.bgp=true")
	if r := find(t, objs, "Role", RolePrefix+"agent-bgp"); r.GetNamespace() != "mooring-system" {
		t.Errorf("Role %s in namespace %q, want the release namespace mooring-system (the peers' password Secrets)", r.GetName(), r.GetNamespace())
	}
	dirs, err := GeneratedRoles(root(t))
	if err != nil || len(dirs) < 5 {
		t.Fatalf("config/rbac holds roles %v (%v): want at least the controller's and the agent's, each with pod IPAM", dirs, err)
	}
	for _, dir := range dirs {
		name := RolePrefix + dir
		want := rbacDocs(t, filepath.Join(root(t), configRBAC, dir, "role.yaml"))
		if len(want) == 0 {
			t.Fatalf("config/rbac/%s/role.yaml holds no role", dir)
		}
		for kind, rules := range want {
			got := find(t, objs, kind, name).Object["rules"]
			if !reflect.DeepEqual(got, rules) {
				t.Errorf("%s %s: chart rules\n%v\nconfig/rbac/%s/role.yaml rules\n%v\n(run make generate)", kind, name, got, dir, rules)
			}
			find(t, objs, kind+"Binding", name)
		}
		for _, kind := range []string{"ClusterRole", "Role"} {
			if _, ok := want[kind]; !ok {
				for _, o := range ofKind(objs, kind) {
					if o.GetName() == name {
						t.Errorf("the chart renders %s %s, config/rbac/%s has none", kind, name, dir)
					}
				}
			}
		}
	}
	defaults := render(t, "--set", "agent.gossipKey.value="+testKey)
	for _, o := range defaults {
		if strings.HasSuffix(o.GetName(), "-pod-ipam") || strings.HasSuffix(o.GetName(), "-bgp") {
			t.Errorf("pod IPAM and BGP are off by default, yet %s %s is rendered", o.GetKind(), o.GetName())
		}
	}
	// Fast eviction is on by default: its role is bound; off, it is not.
	find(t, defaults, "ClusterRoleBinding", "mooring-agent-eviction")
	for _, o := range render(t, "--set", "agent.gossipKey.value="+testKey, "--set", "agent.flags.fastEndpointEviction=false") {
		if strings.HasSuffix(o.GetName(), "-agent-eviction") && strings.HasPrefix(o.GetKind(), "ClusterRole") {
			t.Errorf("fast endpoint eviction is off, yet %s %s is rendered", o.GetKind(), o.GetName())
		}
	}
}

// The chart's CRDs are config/crd's (only the keep annotation added).
func TestCRDsAreConfigCRDs(t *testing.T) {
	objs := render(t, "--set", "agent.gossipKey.value="+testKey, "--set", "crds.keep=false")
	files, _ := filepath.Glob(filepath.Join(root(t), configCRD, "*.yaml"))
	got := ofKind(objs, "CustomResourceDefinition")
	if len(files) == 0 || len(got) != len(files) {
		t.Fatalf("chart renders %d CRDs, config/crd has %d (run make generate)", len(got), len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var want map[string]any
		if err := yaml.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		name := want["metadata"].(map[string]any)["name"].(string)
		if o := find(t, objs, "CustomResourceDefinition", name); !reflect.DeepEqual(o.Object, want) {
			t.Errorf("CRD %s differs from %s (run make generate)", name, f)
		}
	}
}

// config/'s manifests name the chart's default image, pinned, never :latest.
func TestConfigManifestsPinTheImage(t *testing.T) {
	objs := render(t, "--set", "agent.gossipKey.value="+testKey)
	want := container(t, find(t, objs, "Deployment", "mooring-controller"))["image"]
	for _, f := range []string{"config/controller/deployment.yaml", "config/agent/daemonset.yaml"} {
		b, err := os.ReadFile(filepath.Join(root(t), f))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		got := container(t, &unstructured.Unstructured{Object: m})["image"]
		if got != want || strings.HasSuffix(got.(string), ":latest") {
			t.Errorf("%s: image %v, want %v (the chart's appVersion)", f, got, want)
		}
	}
}

// docs/install.md's values reference is what make generate writes.
func TestInstallDocIsCurrent(t *testing.T) {
	r := root(t)
	schema, err := os.ReadFile(filepath.Join(r, SchemaFile))
	if err != nil {
		t.Fatal(err)
	}
	values, err := os.ReadFile(filepath.Join(r, ValuesFile))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := ValuesReference(schema, values)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(r, InstallDoc))
	if err != nil {
		t.Fatal(err)
	}
	want, err := ReplaceReference(doc, ref)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(doc) {
		t.Errorf("%s: the values reference is stale: run make generate", InstallDoc)
	}
	for _, key := range []string{"`controller.flags.workers`", "`agent.gossipKey.insecureNoKey`", "`image.digest`"} {
		if !strings.Contains(ref, key) {
			t.Errorf("values reference lacks %s", key)
		}
	}
}

// The CRDs' CEL IP/CIDR library needs Kubernetes 1.31: the chart says so.
func TestRefusesKubernetesBefore131(t *testing.T) {
	set := "agent.gossipKey.value=" + testKey
	_, err := helm(t, "template", "mooring", Dir, "--set", set, "--kube-version", "1.30.9")
	if err == nil || !strings.Contains(err.Error(), "1.31") {
		t.Errorf("Kubernetes 1.30: err %v, want a refusal naming 1.31", err)
	}
	if _, err := helm(t, "template", "mooring", Dir, "--set", set, "--kube-version", "1.31.0"); err != nil {
		t.Errorf("Kubernetes 1.31: %v", err)
	}
}

// withoutAgentState checks that the agent's snapshot folder (--state-dir,
// on by default) is a hostPath volume and returns the other volumes.
func withoutAgentState(t *testing.T, vols []any) []any {
	t.Helper()
	var out []any
	found := false
	for _, v := range vols {
		if m := v.(map[string]any); m["name"] == "agent-state" {
			found = str(m, "hostPath", "path") == "/var/lib/mooring/agent"
			continue
		}
		out = append(out, v)
	}
	if !found {
		t.Errorf("agent volumes %v: want agent-state, a hostPath at /var/lib/mooring/agent", vols)
	}
	return out
}

// A role file the template has no line for (a new feature's role, say)
// fails rendering, naming the file: it is never silently left unbound.
func TestRoleWithoutLineRefused(t *testing.T) {
	dir := copyChart(t, t.TempDir(), "0.1.0")
	b, err := os.ReadFile(filepath.Join(dir, "files", "rbac", "agent-role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "files", "rbac", "agent-newfeature-role.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = helm(t, "template", "mooring", dir, "--set", "agent.gossipKey.value="+testKey)
	if err == nil || !strings.Contains(err.Error(), "files/rbac/agent-newfeature-role.yaml has no line in templates/rbac.yaml") {
		t.Errorf("rendering with an unknown role file: %v, want a refusal naming it", err)
	}
}
