package failover

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooringlb/mooring/internal/netlab"
)

// TestLabSeams checks the seams the lab plugs in, on real namespaces: the
// client-namespace dialer, the neighbour-table observer and the probe
// observer — and that a dead node shows as connect timeouts, not "000".
func TestLabSeams(t *testing.T) {
	lab := netlab.NewForTest(t, netlab.Config{Nodes: 2})
	node, client := lab.Nodes()[0], lab.Client()

	var ln net.Listener
	if err := node.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(node.Addr4, 8080).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var from atomic.Value
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from.Store(r.RemoteAddr)
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	dial := NamespaceDialer(client.NS())
	target := Target{Addr: netip.AddrPortFrom(node.Addr4, 8080)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, _ := Probe(ctx, dial, target, time.Second); !out.OK() {
		t.Fatalf("from the client: %s", out.Detail)
	}
	if got, _ := from.Load().(string); netip.MustParseAddrPort(got).Addr() != client.Addr4 {
		t.Errorf("request came from %s, want the client %s", got, client.Addr4)
	}

	nl, err := client.NetlinkHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	mac, err := NeighbourTable{Handle: nl}.Owner(ctx, node.Addr4)
	if err != nil || !bytes.Equal(mac, node.MAC) {
		t.Errorf("neighbour table: %v, %v; want %s", mac, err, node.MAC)
	}
	if mac, _ := (NeighbourTable{Handle: nl}).Owner(ctx, lab.Nodes()[1].Addr4); mac != nil {
		t.Errorf("no traffic to node-2 yet, but its MAC %s is in the table", mac)
	}
	probe := ProbeOwner(func(ctx context.Context, a netip.Addr) ([]net.HardwareAddr, error) {
		return netlab.Probe(ctx, client, a, 200*time.Millisecond)
	})
	if mac, err := probe.Owner(ctx, node.Addr4); err != nil || !bytes.Equal(mac, node.MAC) {
		t.Errorf("probe: %v, %v; want %s", mac, err, node.MAC)
	}

	// The same, from a separate process's point of view: by path.
	var tid int
	if err := client.Do(func() error { tid = unix.Gettid(); return nil }); err != nil {
		t.Fatal(err)
	}
	nc, err := OpenNetNSClient(fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), tid))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if out, _ := Probe(ctx, nc.Dial, target, time.Second); !out.OK() {
		t.Errorf("by path: %s", out.Detail)
	}
	if mac, err := nc.Owner.Owner(ctx, node.Addr4); err != nil || !bytes.Equal(mac, node.MAC) {
		t.Errorf("by path, neighbour table: %v, %v", mac, err)
	}

	// The node dies: its link goes down. The client still has its MAC, so
	// the SYN goes out and nothing comes back.
	if err := node.SetLinkDown("eth0"); err != nil {
		t.Fatal(err)
	}
	out, _ := Probe(ctx, dial, target, 300*time.Millisecond)
	if out.Class != ClassConnectTimeout && out.Class != ClassUnreachable {
		t.Errorf("dead node: %s (%s), want connect-timeout", out.Key(), out.Detail)
	}
}
