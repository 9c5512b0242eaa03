package failover

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mooringlb/mooring/internal/cliutil"
	fo "github.com/mooringlb/mooring/internal/failover"
)

func parse(t *testing.T, args ...string) options {
	t.Helper()
	var o options
	f := pflag.NewFlagSet("failover", pflag.ContinueOnError)
	bindFlags(f, &o)
	if err := f.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestValidate(t *testing.T) {
	tests := []struct {
		args []string
		want string // "" for valid
	}{
		{[]string{"--kill-command", "docker kill {node}"}, ""},
		{[]string{"--soft"}, ""},
		{nil, "--kill-command"},
		{[]string{"--soft", "--kill-command", "x"}, "exclude each other"},
		{[]string{"--soft", "-o", "yaml"}, "use table or json"},
	}
	for _, tt := range tests {
		err := parse(t, tt.args...).validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%v: err = %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestCommandRefusesWithoutKillMethod(t *testing.T) {
	var out, errb bytes.Buffer
	cmd := NewCommand(&cliutil.Deps{Streams: cliutil.Streams{Out: &out, Err: &errb}, Log: slog.New(slog.DiscardHandler)})
	cmd.SetArgs([]string{"echo"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--soft") {
		t.Fatalf("err = %v", err)
	}
}

// echoServer answers 200 on 127.0.0.1.
func echoServer(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

func objects(addr netip.AddrPort, ingress string) (*corev1.Service, *discoveryv1.EndpointSlice) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Port: int32(addr.Port()), Protocol: corev1.ProtocolTCP}}},
	}
	if ingress != "" {
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ingress}}
	}
	a, b := "node-a", "node-b"
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "echo-1", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.1.0.1"}, NodeName: &a},
			{Addresses: []string{"10.1.0.2"}, NodeName: &b},
		},
	}
	return svc, es
}

func TestTarget(t *testing.T) {
	addr := netip.MustParseAddrPort("192.0.2.10:8080")
	ctx := context.Background()
	tests := []struct {
		args []string
		ing  string
		want string
		err  string
	}{
		{[]string{"--soft"}, "192.0.2.10", "http://192.0.2.10:8080/", ""},
		{[]string{"--soft", "--port", "80", "--scheme", "tcp"}, "192.0.2.10", "tcp://192.0.2.10:80", ""},
		{[]string{"--soft", "--address", "192.0.2.11"}, "192.0.2.10", "", "not among"},
		{[]string{"--soft"}, "", "", "no LoadBalancer address yet"},
	}
	for _, tt := range tests {
		svc, es := objects(addr, tt.ing)
		k := fo.KubeCluster{Client: fake.NewClientset(svc, es), Namespace: "demo", Name: "echo"}
		o := parse(t, tt.args...)
		tg, err := o.target(ctx, k)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%v: err = %v, want %q", tt.args, err, tt.err)
			}
			continue
		}
		if err != nil || tg.String() != tt.want {
			t.Errorf("%v: target %s, %v; want %s", tt.args, tg, err, tt.want)
		}
	}
}

// TestRunWithCommandKiller runs the whole verb against a fake clientset and
// a loopback server: the kill command only records the node it was given,
// nothing fails, and the dead node's endpoints never leave — so phase 2 is
// reported as a lower bound with a warning.
func TestRunWithCommandKiller(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 2 s")
	}
	addr := echoServer(t)
	svc, es := objects(addr, addr.Addr().String())
	client := fake.NewClientset(svc, es)
	dir := t.TempDir()
	mark := filepath.Join(dir, "killed")
	svgDir := filepath.Join(dir, "svg")
	for _, format := range []string{"table", "json"} {
		t.Run(format, func(t *testing.T) {
			o := parse(t, "-n", "demo", "--kill-command", "echo {node} > "+mark, "--no-neighbour", "--rate", "50",
				"--timeout", "500ms", "--quiet", "200ms", "--max-run", "800ms", "--warmup", "5s", "-o", format, "--svg-dir", svgDir)
			o.announcedBy = func(context.Context, netip.Addr) (string, error) { return "node-a", nil }
			var out, errb bytes.Buffer
			deps := &cliutil.Deps{Streams: cliutil.Streams{Out: &out, Err: &errb}, Log: slog.New(slog.DiscardHandler)}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := runWith(ctx, deps, o, "echo", client, nil); err != nil {
				t.Fatalf("%v\nstderr:\n%s", err, errb.String())
			}
			b, _ := os.ReadFile(mark)
			if strings.TrimSpace(string(b)) != "node-a" {
				t.Errorf("kill command got %q, want node-a", b)
			}
			if !strings.Contains(errb.String(), "+0.00s] killing node-a (named by") {
				t.Errorf("no progress on stderr:\n%s", errb.String())
			}
			if _, err := os.Stat(filepath.Join(svgDir, "failover-run-01.svg")); err != nil {
				t.Error(err)
			}
			switch format {
			case "table":
				// No --restore-command: the output says the node stays killed.
				for _, s := range []string{"node-a", "≥", "did not leave the EndpointSlices", "timeline picture",
					"WARNING: node-a is left killed: no restore command was given"} {
					if !strings.Contains(out.String(), s) {
						t.Errorf("table lacks %q:\n%s", s, out.String())
					}
				}
			case "json":
				var rep struct {
					Service, Target string
					Runs            []struct {
						KilledNode     string `json:"killed_node"`
						Phase2Complete bool   `json:"phase2_complete"`
						Failed         int
					}
				}
				if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
					t.Fatalf("%v\n%s", err, out.String())
				}
				if rep.Service != "demo/echo" || len(rep.Runs) != 1 || rep.Runs[0].KilledNode != "node-a" || rep.Runs[0].Phase2Complete {
					t.Errorf("report %+v", rep)
				}
				if !strings.HasSuffix(rep.Target, ":"+strconv.Itoa(int(addr.Port()))+"/") {
					t.Errorf("target %s", rep.Target)
				}
			}
		})
	}
}

func TestRunRefusesUnspreadBackends(t *testing.T) {
	addr := echoServer(t)
	svc, es := objects(addr, addr.Addr().String())
	b := "node-a"
	es.Endpoints[1].NodeName = &b
	client := fake.NewClientset(svc, es)
	mark := filepath.Join(t.TempDir(), "killed")
	o := parse(t, "-n", "demo", "--kill-command", "echo {node} > "+mark, "--no-neighbour")
	var out, errb bytes.Buffer
	deps := &cliutil.Deps{Streams: cliutil.Streams{Out: &out, Err: &errb}, Log: slog.New(slog.DiscardHandler)}
	err := runWith(context.Background(), deps, o, "echo", client, nil)
	if err == nil || !strings.Contains(err.Error(), "all 2 ready backends are on node node-a") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("the kill command ran")
	}
}

func TestClientNetNSBadPath(t *testing.T) {
	addr := echoServer(t)
	svc, es := objects(addr, addr.Addr().String())
	o := parse(t, "-n", "demo", "--soft", "--client-netns", filepath.Join(t.TempDir(), "nope"))
	deps := &cliutil.Deps{Streams: cliutil.Streams{Out: io.Discard, Err: io.Discard}, Log: slog.New(slog.DiscardHandler)}
	err := runWith(context.Background(), deps, o, "echo", fake.NewClientset(svc, es), nil)
	if err == nil || !strings.Contains(err.Error(), "--client-netns") {
		t.Fatalf("err = %v", err)
	}
}
