package arpprobe_test

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/arpprobe"
	"github.com/mooringlb/mooring/internal/netlab"
)

// The real sockets, in namespaces (the test alone may import netlab, which
// itself stands on this package).

// probeFrom runs ProbeInterface on h's eth0 from a thread inside h's
// namespace, as Listen requires.
func probeFrom(t *testing.T, h *netlab.Host, addrs []netip.Addr, opts arpprobe.Options) arpprobe.Result {
	t.Helper()
	ifi, err := h.Interface()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got arpprobe.Result
	if err := h.Do(func() error {
		got, err = arpprobe.ProbeInterface(ctx, ifi, addrs, opts)
		return err
	}); err != nil {
		t.Fatalf("ProbeInterface from %s: %v", h.Name, err)
	}
	return got
}

func macStrings(macs []net.HardwareAddr) []string {
	out := make([]string, len(macs))
	for i, m := range macs {
		out[i] = m.String()
	}
	return out
}

func TestProbeInterfaceBothFamilies(t *testing.T) {
	l := netlab.NewForTest(t, netlab.Config{Nodes: 2})
	c, nodes := l.Client(), l.Nodes()
	nobody := netip.MustParseAddr("10.213.0.100")
	got := probeFrom(t, c, []netip.Addr{nodes[0].Addr4, nodes[1].Addr6, nobody},
		arpprobe.Options{Src4: c.Addr4, Src6: c.Addr6, Wait: 200 * time.Millisecond})
	if len(got) != 2 ||
		!slices.Equal(macStrings(got[nodes[0].Addr4]), []string{nodes[0].MAC.String()}) ||
		!slices.Equal(macStrings(got[nodes[1].Addr6]), []string{nodes[1].MAC.String()}) {
		t.Fatalf("ProbeInterface = %v, want %s: %s, %s: %s", got, nodes[0].Addr4, nodes[0].MAC, nodes[1].Addr6, nodes[1].MAC)
	}
}

// TestProbeInterfaceExcludeOwn is the agent's split-brain view from a node
// that holds the address itself: only the other claimant counts.
func TestProbeInterfaceExcludeOwn(t *testing.T) {
	l := netlab.NewForTest(t, netlab.Config{Nodes: 2})
	nodes := l.Nodes()
	vip := netip.MustParseAddr("10.213.0.150")
	for _, n := range nodes {
		if err := n.AddAddr("lo", netip.PrefixFrom(vip, 32)); err != nil {
			t.Fatal(err)
		}
	}
	got := probeFrom(t, nodes[0], []netip.Addr{vip}, arpprobe.Options{
		Src4: nodes[0].Addr4, Wait: 200 * time.Millisecond, ExcludeOwn: true, AnyDestination: true,
	})
	if !slices.Equal(macStrings(got[vip]), []string{nodes[1].MAC.String()}) {
		t.Fatalf("ProbeInterface from %s = %v, want only %s", nodes[0].Name, got, nodes[1].MAC)
	}
}

// A prober that runs late (a starved or stopped process: its goroutine
// gets the CPU only after the wait passed) still sees the answers that
// came within the wait, instead of concluding that nobody answered. The
// agent's early drop of a dead peer trusts a late check because of this.
func TestProbeLateStillSeesAnswers(t *testing.T) {
	l := netlab.NewForTest(t, netlab.Config{Nodes: 1})
	c, node := l.Client(), l.Nodes()[0]
	wait := 100 * time.Millisecond
	arpprobe.SetBeforeCollect(func() { time.Sleep(3 * wait) })
	t.Cleanup(func() { arpprobe.SetBeforeCollect(nil) })
	got := probeFrom(t, c, []netip.Addr{node.Addr4, node.Addr6}, arpprobe.Options{Src4: c.Addr4, Src6: c.Addr6, Wait: wait})
	for _, a := range []netip.Addr{node.Addr4, node.Addr6} {
		if !slices.Equal(macStrings(got[a]), []string{node.MAC.String()}) {
			t.Errorf("late probe of %s = %v, want %s: the answer waited in the socket", a, got[a], node.MAC)
		}
	}
}

// A late prober on a busy IPv6 link still sees the answer: another host
// floods the prober with IPv6 datagrams, and the prober is starved twice:
// 50 ms between opening its socket and sending its request (the flood
// queues behind it), then past its wait. Without the socket's filter the
// flood fills the socket's buffer before the answer comes, the kernel
// drops the answer, and the check concludes that nobody answered.
func TestProbeLateOnFloodedLinkStillSeesAnswers(t *testing.T) {
	l := netlab.NewForTest(t, netlab.Config{Nodes: 2})
	c, node, flooder := l.Client(), l.Nodes()[0], l.Nodes()[1]
	stop := make(chan struct{})
	flooded := make(chan int, 1)
	go func() {
		sent := 0
		_ = flooder.Do(func() error {
			conn, err := net.DialUDP("udp6", nil, &net.UDPAddr{IP: c.Addr6.AsSlice(), Port: 9})
			if err != nil {
				return err
			}
			defer conn.Close()
			payload := make([]byte, 1200)
			deadline := time.Now().Add(5 * time.Second) // bounded whatever happens
			for time.Now().Before(deadline) {
				select {
				case <-stop:
					return nil
				default:
				}
				if _, err := conn.Write(payload); err == nil {
					sent++
				}
			}
			return nil
		})
		flooded <- sent
	}()
	time.Sleep(20 * time.Millisecond) // the flood is on before the probe
	wait := 100 * time.Millisecond
	arpprobe.SetBeforeSend(func() { time.Sleep(50 * time.Millisecond) })
	arpprobe.SetBeforeCollect(func() { time.Sleep(3 * wait) })
	t.Cleanup(func() { arpprobe.SetBeforeSend(nil); arpprobe.SetBeforeCollect(nil) })
	got := probeFrom(t, c, []netip.Addr{node.Addr6}, arpprobe.Options{Src6: c.Addr6, Wait: wait})
	close(stop)
	sent := <-flooded
	t.Logf("%d flood datagrams sent", sent)
	if sent < 1000 {
		t.Fatalf("only %d flood datagrams: the test did not flood", sent)
	}
	if !slices.Equal(macStrings(got[node.Addr6]), []string{node.MAC.String()}) {
		t.Fatalf("late probe of %s on a flooded link = %v, want %s", node.Addr6, got[node.Addr6], node.MAC)
	}
}
