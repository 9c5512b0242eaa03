package audit

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooringlb/mooring/internal/arpprobe"
	"github.com/mooringlb/mooring/internal/netlab"
	"github.com/mooringlb/mooring/internal/testenv"
)

// TestAuditNamesNodes: two nodes answer for one address (stale copies on
// lo); the audit, run from the client namespace against a real apiserver
// holding the two Nodes, names both MACs by asking the segment who answers
// for each Node's InternalIP.
func TestAuditNamesNodes(t *testing.T) {
	l := netlab.NewForTest(t, netlab.Config{Nodes: 2})
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vip := netip.MustParseAddr("10.213.0.150")
	for _, n := range l.Nodes() {
		if err := n.AddAddr("lo", netip.PrefixFrom(vip, 32)); err != nil {
			t.Fatal(err)
		}
		nd := node(n.Name, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: n.Addr4.String()})
		if _, err := env.Clientset.CoreV1().Nodes().Create(ctx, nd, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	client := l.Client()
	ifi, err := client.Interface()
	if err != nil {
		t.Fatal(err)
	}
	src := map[bool]netip.Addr{false: client.Addr4}
	inClient := func(addrs []netip.Addr) (r arpprobe.Result, err error) {
		err = client.Do(func() error {
			r, err = arpprobe.ProbeInterface(ctx, ifi, addrs, arpprobe.Options{Src4: src[false], Wait: 300 * time.Millisecond})
			return err
		})
		return r, err
	}
	got, err := inClient([]netip.Addr{vip})
	if err != nil {
		t.Fatal(err)
	}
	res := Result{Addr: vip, Responders: got.MACs(vip)}
	if len(res.Responders) != 2 {
		t.Fatalf("want a split with 2 responders, got %v", res.Responders)
	}
	names, err := nameMACs(ctx, res.Responders, LabMACs{Dir: t.TempDir()}, APIMACs{
		Client: env.Clientset, Local: []netip.Addr{client.Addr4}, LocalMAC: client.MAC,
		Probe: func(_ context.Context, addrs []netip.Addr) (arpprobe.Result, error) { return inClient(addrs) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Print(&b, []Result{res}, names); err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Nodes() {
		if want := n.MAC.String() + " (" + n.Name + ")"; !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}
