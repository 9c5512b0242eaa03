package podipamctl_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/ipamd"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/podipamctl"
	"github.com/mooringlb/mooring/internal/testenv"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRunsWithItsRole runs the controller side and the agent side of pod
// IPAM with ServiceAccount credentials bound by their own roles only
// (config/rbac/controller-pod-ipam and config/rbac/agent-pod-ipam):
// the mode is recorded, blocks are cut and written, a pod gets an address,
// a deleted pod's leaked address is reconciled away (the node's Node read
// and its pods listed with the agent's role), a pod whose pool does not
// exist gets its Warning Event (events.k8s.io, written with the agent's
// role), and nothing is refused.
func TestRunsWithItsRole(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	c := e.Client
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"mooring-controller", "mooring-agent"} {
		if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"controller-pod-ipam/role.yaml", "controller-pod-ipam/role_binding.yaml", "agent-pod-ipam/role.yaml", "agent-pod-ipam/role_binding.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, "config", "rbac", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
				t.Fatal(err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			if err := c.Create(ctx, obj); err != nil {
				t.Fatalf("apply %s %s: %v", f, obj.GetName(), err)
			}
		}
	}
	as := func(sa string) *rest.Config {
		tok, err := e.Clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return &rest.Config{Host: e.Config.Host, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: e.Config.CAData}}
	}
	ctrlCfg, agentCfg := as("mooring-controller"), as("mooring-agent")
	saClient, err := client.New(ctrlCfg, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := podipamctl.LockMode(ctx, saClient, ns, podipamctl.ModeMultiPool, "test"); err != nil {
		t.Fatalf("record the mode as the controller: %v", err)
	}
	mkPool(t, c, "default", []string{"10.244.0.0/16"}, 26, nil, 0)
	mkBareNode(t, c, "node-1")
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	startPodIPAMAs(t, ctrlCfg, podipamctl.Config{Mode: podipamctl.ModeMultiPool, PreAllocate: 8, Log: log})

	dir := t.TempDir()
	nodeCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- podipamctl.RunNode(nodeCtx, podipamctl.NodeConfig{REST: agentCfg, NodeName: "node-1", Namespace: ns,
			StateDir: filepath.Join(dir, "state"), Socket: filepath.Join(dir, "s.sock"), PreAllocate: 8, Grace: time.Minute,
			Interval: 100 * time.Millisecond, ReconcileInterval: 100 * time.Millisecond, Log: log})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunNode: %v", err)
		}
	}()
	cl := ipamd.NewClient(filepath.Join(dir, "s.sock"))
	al := add(t, c, cl, "web", "default", "web")
	if len(al.IPs) != 1 {
		t.Fatalf("allocation %+v", al)
	}
	add(t, c, cl, "gone", "default", "gone")
	deletePod(t, c, "default", "gone")
	eventually(t, 10*time.Second, "the deleted pod's address reconciled away", func() error {
		if got := stored(t, filepath.Join(dir, "state")); len(got) != 1 || got[0] != "web" {
			return fmt.Errorf("store holds %v, want web only", got)
		}
		return nil
	})
	ghost := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ghost", Annotations: map[string]string{mooringv1.AnnotationPodIPPool: "nope"}}}
	if err := c.Create(ctx, ghost); err != nil {
		t.Fatal(err)
	}
	mkPod(t, c, "ghost", "g")
	eventually(t, 10*time.Second, "unknown pool refused", func() error {
		if _, err := cl.Add(ctx, ipamd.AddRequest{Key: ipamd.Key{ContainerID: "g", IfName: "eth0"}, Namespace: "ghost", Pod: "g"}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
			return fmt.Errorf("ADD error %v, want the missing pool named", err)
		}
		return nil
	})
	eventually(t, 20*time.Second, "Event "+podipamctl.ReasonPoolNotFound+" on pod ghost/g, written with the agent's role", func() error {
		return podEvent(ctx, e, "ghost", "g", podipamctl.ReasonPoolNotFound, "create it or fix the annotation")
	})
	eventually(t, 10*time.Second, "pool status written", func() error {
		if s := pool(t, c, "default").Status; s.IPv4 == nil || s.IPv4.Blocks != 1 {
			return errString("no pool status yet")
		}
		return nil
	})
	if strings.Contains(strings.ToLower(logs.String()), "forbidden") {
		t.Fatalf("refused a request with its own role:\n%s", logs.String())
	}
}

type errString string

func (e errString) Error() string { return string(e) }
