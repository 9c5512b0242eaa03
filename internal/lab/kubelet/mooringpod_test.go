package kubelet

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestImageRepository(t *testing.T) {
	for in, want := range map[string]string{
		"mooring.dev/lab-mooring":                       "mooring.dev/lab-mooring",
		"mooring.dev/lab-mooring:v0.1.0":                "mooring.dev/lab-mooring",
		"mooring.dev/lab-mooring@sha256:abcd":           "mooring.dev/lab-mooring",
		"reg:5000/a/b:v1@sha256:abcd":                   "reg:5000/a/b",
		"reg:5000/a/b":                                  "reg:5000/a/b",
		"ghcr.io/mooringlb/mooring:v0.1.0":              "ghcr.io/mooringlb/mooring",
		"mooring.dev/lab-mooring-other:v1":              "mooring.dev/lab-mooring-other",
		"docker.io/library/busybox:1.36@sha256:0123abc": "docker.io/library/busybox",
	} {
		if got := imageRepository(in); got != want {
			t.Errorf("imageRepository(%q) = %q, want %q", in, got, want)
		}
	}
}

// Only single-container pods of the configured repository are Mooring's;
// the node runs them whatever their network (hostNetwork agents too).
func TestIsMooringPod(t *testing.T) {
	k := &kubelet{cfg: Config{MooringImage: MooringImage}}
	pod := func(images ...string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true}}
		for _, im := range images {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "c", Image: im})
		}
		return p
	}
	if ok, why := k.runnable(pod(MooringImage + ":v0.1.0")); !ok {
		t.Errorf("a hostNetwork pod of the Mooring image is not run: %s", why)
	}
	if ok, _ := k.runnable(pod(MooringImage, MooringImage)); ok {
		t.Error("a pod of two containers is run")
	}
	if ok, _ := k.runnable(pod("ghcr.io/mooringlb/mooring:v0.1.0")); ok {
		t.Error("a hostNetwork pod of another image is run")
	}
	withInit := pod(MooringImage)
	withInit.Spec.InitContainers = []corev1.Container{{Name: "i", Image: MooringImage}}
	if k.isMooringPod(withInit) {
		t.Error("a pod with init containers counts as Mooring's")
	}
	off := &kubelet{cfg: Config{}}
	if ok, _ := off.runnable(pod(MooringImage)); ok {
		t.Error("without --mooring-image a hostNetwork pod is run")
	}
}

func TestExpand(t *testing.T) {
	env := map[string]string{"HOST_IP": "10.213.0.11", "EMPTY": ""}
	for in, want := range map[string]string{
		"--gossip-bind-address=$(HOST_IP)": "--gossip-bind-address=10.213.0.11",
		"$(HOST_IP):$(HOST_IP)":            "10.213.0.11:10.213.0.11",
		"$(UNKNOWN)":                       "$(UNKNOWN)",
		"$$(HOST_IP)":                      "$(HOST_IP)",
		"a$(EMPTY)b":                       "ab",
		"cost $5":                          "cost $5",
		"trailing $":                       "trailing $",
		"$(unclosed":                       "$(unclosed",
		"plain":                            "plain",
	} {
		if got := expand(in, env); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

// The container's command line: the image's binary replaced by the lab's,
// $(VAR) expanded in command and args.
func TestPodArgv(t *testing.T) {
	env := map[string]string{"HOST_IP": "10.213.0.11"}
	c := &corev1.Container{Args: []string{"agent", "--gossip-bind-address=$(HOST_IP)"}}
	if got := podArgv("/bin/mooring", c, env); !slices.Equal(got, []string{"/bin/mooring", "agent", "--gossip-bind-address=10.213.0.11"}) {
		t.Errorf("args only: %q", got)
	}
	c = &corev1.Container{Command: []string{"/mooring", "controller"}, Args: []string{"--x=$(HOST_IP)"}}
	if got := podArgv("/bin/mooring", c, env); !slices.Equal(got, []string{"/bin/mooring", "controller", "--x=10.213.0.11"}) {
		t.Errorf("command and args: %q", got)
	}
}

// The environment as the chart's agent sees it: downward API (fieldRef,
// resourceFieldRef), Secret and ConfigMap keys, envFrom, $(VAR) references
// to earlier variables, the apiserver's Service variables, and the lab's
// extra variables overridden by the pod's own.
func TestContainerEnv(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-x", Namespace: "mooring-system", UID: "u-1", Labels: map[string]string{"app": "a"}},
		Spec:       corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "mooring-agent"},
	}
	c := &corev1.Container{
		Name: "agent",
		Resources: corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m")},
		},
		EnvFrom: []corev1.EnvFromSource{
			{Prefix: "CM_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}},
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "missing"}, Optional: ptr.To(true)}},
		},
		Env: []corev1.EnvVar{
			{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
			{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
			{Name: "POD_IPS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}},
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
			{Name: "MEM_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
			{Name: "CPU_LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
			{Name: "CPU_REQ_M", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}}},
			{Name: "KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}},
			{Name: "ADDR", Value: "$(HOST_IP):7946"},
			{Name: "SWITCH", Value: "pod"},
		},
	}
	get := func(_ context.Context, kind, ns, name string) (map[string][]byte, error) {
		switch {
		case ns != "mooring-system":
			return nil, errors.New("wrong namespace " + ns)
		case kind == "Secret" && name == "s":
			return map[string][]byte{"k": []byte("secret-value")}, nil
		case kind == "ConfigMap" && name == "cm":
			return map[string][]byte{"a": []byte("1")}, nil
		}
		return nil, errors.New(kind + " " + name + " not found")
	}
	f := podFacts{pod: pod, nodeIPs: []netip.Addr{netip.MustParseAddr("10.213.0.11"), netip.MustParseAddr("fd00:213::b")},
		podIPs: []netip.Addr{netip.MustParseAddr("10.213.0.11"), netip.MustParseAddr("fd00:213::b")}, allocatable: nodeAllocatableForTest()}
	svc := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.1", Ports: []corev1.ServicePort{{Port: 443}}}}
	env, vals, err := containerEnv(context.Background(), f, c, append([]string{"PATH=/"}, serviceEnv(svc)...), []string{"SWITCH=lab", "MOORING_TEST=1"}, get)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"NODE_NAME": "node-1", "HOST_IP": "10.213.0.11", "POD_IPS": "10.213.0.11,fd00:213::b", "POD_NAME": "agent-x",
		"POD_NS": "mooring-system", "APP": "a", "MEM_MI": "256", "CPU_LIMIT": "2", "CPU_REQ_M": "20", "KEY": "secret-value",
		"ADDR": "10.213.0.11:7946", "SWITCH": "pod", "MOORING_TEST": "1", "CM_a": "1", "PATH": "/",
		"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
	}
	for k, v := range want {
		if vals[k] != v {
			t.Errorf("%s = %q, want %q", k, vals[k], v)
		}
	}
	if len(env) != len(vals) {
		t.Errorf("%d variables but %d distinct names: %q", len(env), len(vals), env)
	}
	if !slices.Contains(env, "SWITCH=pod") || slices.Contains(env, "SWITCH=lab") {
		t.Errorf("the pod's value must replace the lab's: %q", env)
	}

	c.Env = append(c.Env, corev1.EnvVar{Name: "BAD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "nope"}}})
	if _, _, err := containerEnv(context.Background(), f, c, nil, nil, get); err == nil || !strings.Contains(err.Error(), "BAD") {
		t.Errorf("a missing Secret key: err %v, want one naming the variable", err)
	}
	c.Env[len(c.Env)-1].ValueFrom.SecretKeyRef.Optional = ptr.To(true)
	if _, vals, err := containerEnv(context.Background(), f, c, nil, nil, get); err != nil || vals["BAD"] != "" {
		t.Errorf("an optional missing key: %v, %q", err, vals["BAD"])
	}
	c.Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.phase"}}}}
	if _, _, err := containerEnv(context.Background(), f, c, nil, nil, get); err == nil {
		t.Error("an unsupported fieldRef was accepted")
	}
}

func nodeAllocatableForTest() corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}
}

func TestVolumeFiles(t *testing.T) {
	data := map[string][]byte{"keys": []byte("k1\n"), "other": []byte("x")}
	files, err := volumeFiles(data, []corev1.KeyToPath{{Key: "keys", Path: "keys"}}, ptr.To[int32](0o400))
	if err != nil || len(files) != 1 || files[0].Path != "keys" || files[0].Mode != 0o400 || string(files[0].Data) != "k1\n" {
		t.Fatalf("items: %+v, %v", files, err)
	}
	files, err = volumeFiles(data, nil, nil)
	if err != nil || len(files) != 2 || files[0].Path != "keys" || files[1].Mode != 0o644 {
		t.Fatalf("all keys: %+v, %v", files, err)
	}
	if _, err := volumeFiles(data, []corev1.KeyToPath{{Key: "missing", Path: "m"}}, nil); err == nil {
		t.Error("a missing item key was accepted")
	}
	if _, err := volumeFiles(data, []corev1.KeyToPath{{Key: "keys", Path: "../escape"}}, nil); err == nil {
		t.Error("an item path with .. was accepted")
	}
}

func TestAutomountToken(t *testing.T) {
	pod := &corev1.Pod{}
	if !automountToken(pod, nil) || serviceAccountName(pod) != "default" {
		t.Error("defaults: a token for the default ServiceAccount")
	}
	sa := &corev1.ServiceAccount{AutomountServiceAccountToken: ptr.To(false)}
	if automountToken(pod, sa) {
		t.Error("the ServiceAccount's opt-out is ignored")
	}
	pod.Spec.AutomountServiceAccountToken = ptr.To(true)
	if !automountToken(pod, sa) {
		t.Error("the pod's setting must win over its ServiceAccount's")
	}
}

func TestParseBinds(t *testing.T) {
	m, err := ParseBinds([]string{"/a=/etc/x"}, []string{"/b=/var/run/secrets/kubernetes.io/serviceaccount"})
	if err != nil || len(m) != 2 || m[0].ReadOnly || !m[1].ReadOnly || m[1].Target != ServiceAccountDir {
		t.Fatalf("%+v, %v", m, err)
	}
	for _, bad := range []string{"/a", "a=/b", "/a=b"} {
		if _, err := ParseBinds([]string{bad}, nil); err == nil {
			t.Errorf("bind %q accepted", bad)
		}
	}
}

// The readiness probe: named ports, not ready before the first success,
// failureThreshold failures to turn unready, and back.
func TestProber(t *testing.T) {
	var mu sync.Mutex
	healthy := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path != "/readyz" || !healthy {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	ap := netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
	c := &corev1.Container{Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: int32(ap.Port())}}}
	pr := &prober{c: c, addr: ap.Addr(), probe: &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("metrics")}},
		PeriodSeconds: 1, FailureThreshold: 2,
	}}
	changes := make(chan bool, 10)
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go pr.run(ctx, done, func(ready bool, _ string) { changes <- ready })
	next := func() bool {
		select {
		case r := <-changes:
			return r
		case <-time.After(20 * time.Second):
			t.Fatal("no readiness change")
			return false
		}
	}
	if !next() {
		t.Fatal("first change is not to ready")
	}
	mu.Lock()
	healthy = false
	mu.Unlock()
	if next() {
		t.Fatal("a failing probe did not turn the pod unready")
	}
	mu.Lock()
	healthy = true
	mu.Unlock()
	if !next() {
		t.Fatal("a passing probe did not turn the pod ready again")
	}
	close(done)

	if _, err := containerPort(c, intstr.FromString("nope")); err == nil {
		t.Error("an unknown named port was accepted")
	}
	if d, p, to, s, f := probeTimings(&corev1.Probe{}); d != 0 || p != 10*time.Second || to != time.Second || s != 1 || f != 3 {
		t.Errorf("defaults: %v %v %v %d %d", d, p, to, s, f)
	}
}

func TestServiceEnv(t *testing.T) {
	env := serviceEnv(&corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "fd00:96::1", Ports: []corev1.ServicePort{{Port: 443}}}})
	if !slices.Contains(env, "KUBERNETES_SERVICE_HOST=fd00:96::1") || !slices.Contains(env, "KUBERNETES_PORT=tcp://[fd00:96::1]:443") {
		t.Errorf("%q", env)
	}
	if serviceEnv(nil) != nil {
		t.Error("no Service, no variables")
	}
}
