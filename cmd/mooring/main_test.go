package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/cli/status"
	"github.com/mooringlb/mooring/internal/testenv"
)

// binDir holds the binary under test, built once: mooring and its
// kubectl-mooring link.
var binDir string

// shared is the one control plane the tests share (started by the first
// that needs it, stopped by TestMain).
var shared struct {
	once sync.Once
	env  *testenv.Env
	kc   string
	err  error
}

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "mooring-cli-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		build := exec.Command("go", "build", "-o", filepath.Join(dir, "mooring"), ".")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building mooring:", err)
			return 1
		}
		if err := os.Link(filepath.Join(dir, "mooring"), filepath.Join(dir, "kubectl-mooring")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		binDir = dir
		ctrllog.SetLogger(logr.Discard())
		code := m.Run()
		if shared.env != nil {
			if err := shared.env.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
			}
		}
		return code
	}())
}

// cluster is a real apiserver holding LoadBalancer Services in every
// state `mooring status` distinguishes, and the kubeconfig to reach it.
func cluster(t *testing.T) string {
	t.Helper()
	if _, err := testenv.BinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	shared.once.Do(func() {
		if shared.env, shared.err = testenv.Start(); shared.err == nil {
			shared.kc, shared.err = populate(shared.env)
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.kc
}

func populate(env *testenv.Env) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := env.Clientset
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	svc := func(name string, class *string, mut func(*corev1.Service)) error {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: class,
				Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
		}
		s, err := cs.CoreV1().Services("demo").Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if mut == nil {
			return nil
		}
		mut(s)
		_, err = cs.CoreV1().Services("demo").UpdateStatus(ctx, s, metav1.UpdateOptions{})
		return err
	}
	now := metav1.Now()
	err1 := svc("echo", nil, func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.213.0.100"}}
		s.Status.Conditions = []metav1.Condition{{Type: mooringv1.ConditionAddressAssigned, Status: metav1.ConditionTrue,
			Reason: "Assigned", Message: "10.213.0.100 from pool demo", LastTransitionTime: now}}
	})
	err2 := svc("api", nil, func(s *corev1.Service) {
		s.Status.Conditions = []metav1.Condition{{Type: mooringv1.ConditionAddressAssigned, Status: metav1.ConditionFalse,
			Reason: "PoolExhausted", Message: "no pool has a free IPv4 address", LastTransitionTime: now}}
	})
	other := "example.com/lb"
	if err := errors.Join(err1, err2, svc("elsewhere", &other, nil)); err != nil {
		return "", err
	}
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "demo", Name: "echo.split"},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: "demo", Name: "echo"},
		Type:           corev1.EventTypeWarning, Reason: mooringv1.EventReasonSplitBrain, Count: 1,
		Message:        "split brain: 10.213.0.100 is announced by node-2 on eth0, but 02:00:00:00:00:09 also answered for it",
		Source:         corev1.EventSource{Component: "mooring-agent", Host: "node-2"},
		FirstTimestamp: now, LastTimestamp: now,
	}
	if _, err := cs.CoreV1().Events("demo").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	return env.KubeconfigFile(binDir, "cli")
}

// run runs the built binary (or another program) with env added to a
// clean environment: no $KUBECONFIG unless given.
func run(t *testing.T, env []string, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append([]string{"PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

func checkTable(t *testing.T, what, out string) {
	t.Helper()
	for _, want := range []string{
		"NAMESPACE", "PROBLEMS",
		"10.213.0.100", "True/Assigned", "NotAnnounced (now), L2SplitBrain (",
		"<pending>", "False/PoolExhausted", "no pool has a free IPv4 address",
		"<other class>", "not Mooring's: loadBalancerClass example.com/lb",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("%s: output lacks %q:\n%s", what, want, out)
		}
	}
}

// `mooring status` finds the cluster by --kubeconfig, then $KUBECONFIG,
// and says what to do when neither is there.
func TestStatusAgainstAPIServer(t *testing.T) {
	kc := cluster(t)
	mooring := filepath.Join(binDir, "mooring")
	out, stderr, err := run(t, nil, mooring, "status", "--kubeconfig", kc)
	if err != nil {
		t.Fatalf("status --kubeconfig: %v\n%s", err, stderr)
	}
	checkTable(t, "--kubeconfig", out)

	out, stderr, err = run(t, []string{"KUBECONFIG=" + kc}, mooring, "status", "-n", "demo", "-o", "json")
	if err != nil {
		t.Fatalf("status with $KUBECONFIG: %v\n%s", err, stderr)
	}
	var l struct {
		Services []struct {
			Name     string `json:"name"`
			Problems []struct {
				Reason string `json:"reason"`
				Node   string `json:"node"`
			} `json:"problems"`
		} `json:"services"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	// echo's address: no agent runs (no L2Announcer), so besides the split
	// brain Event it has a current NotAnnounced reason, listed first.
	if len(l.Services) != 3 || l.Services[1].Name != "echo" || len(l.Services[1].Problems) != 2 ||
		l.Services[1].Problems[0].Reason != status.ReasonNotAnnounced ||
		l.Services[1].Problems[1].Reason != mooringv1.EventReasonSplitBrain || l.Services[1].Problems[1].Node != "node-2" {
		t.Errorf("-o json: %+v", l)
	}

	_, stderr, err = run(t, []string{"KUBERNETES_SERVICE_HOST="}, mooring, "status")
	if code := exitCode(err); code != 1 || !strings.Contains(stderr, "pass --kubeconfig FILE or set $KUBECONFIG") ||
		strings.Count(stderr, "Error:") != 1 {
		t.Errorf("no cluster: exit %d, stderr:\n%s", code, stderr)
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// kubectl finds the plugin and runs it: the lab's matching kubectl when
// $MOORING_KUBEBIN has one, else the machine's.
func kubectl(t *testing.T) string {
	t.Helper()
	if d := os.Getenv(testenv.EnvBinDir); d != "" {
		if p := filepath.Join(d, "kubectl"); isExec(p) {
			return p
		}
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("kubectl not found ($MOORING_KUBEBIN/kubectl or on $PATH): hack/install-deps.sh installs it")
	}
	t.Skip("kubectl not found")
	return ""
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func TestKubectlPlugin(t *testing.T) {
	k := kubectl(t)
	out, stderr, err := run(t, nil, k, "plugin", "list")
	if err != nil || !strings.Contains(out, filepath.Join(binDir, "kubectl-mooring")) {
		t.Fatalf("kubectl plugin list: %v\n%s%s", err, out, stderr)
	}
	out, stderr, err = run(t, nil, k, "mooring", "version")
	if err != nil || !strings.HasPrefix(out, "mooring ") {
		t.Errorf("kubectl mooring version: %v\n%s%s", err, out, stderr)
	}
	for _, verb := range []string{"status", "audit", "failover"} {
		out, stderr, err = run(t, nil, k, "mooring", verb, "--help")
		if err != nil || !strings.Contains(out, "kubectl mooring "+verb) {
			t.Errorf("kubectl mooring %s --help: %v\n%s%s", verb, err, out, stderr)
		}
	}
	kc := cluster(t)
	out, stderr, err = run(t, []string{"KUBECONFIG=" + kc}, k, "mooring", "status")
	if err != nil {
		t.Fatalf("kubectl mooring status: %v\n%s", err, stderr)
	}
	checkTable(t, "kubectl mooring status", out)
}
