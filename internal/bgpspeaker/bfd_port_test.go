package bgpspeaker_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"

	mbfd "github.com/mooringlb/mooring/internal/bfd"
	mbgp "github.com/mooringlb/mooring/internal/bgp"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
)

// TestBFDPortTaken: another daemon on the node holds BFD's UDP port
// 3784. The BGP session still comes up (BFD cannot fail it), BFD shows
// Down, and once the port is free the node's BFD starts by itself (the
// status listing tries again every second).
func TestBFDPortTaken(t *testing.T) {
	held, err := net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", mbfd.Port))
	if err != nil {
		t.Skipf("UDP %d is taken on this machine already: %v", mbfd.Port, err)
	}
	defer held.Close()
	rcv := newReceiver(t, "127.0.0.3", 64500, "127.0.0.2", 64512, api.Family_AFI_IP)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	g := bgpspeaker.NewGoBGP(log, nil)
	sp := bgpspeaker.New(g, log, -1)
	t.Cleanup(func() { _ = sp.Shutdown(context.Background(), false) })
	ses := rcv.session("r", 64500)
	ses.Families = []mbgp.Family{mbgp.IPv4}
	ses.BFD = &mbgp.BFD{ReceiveInterval: 300 * time.Millisecond, TransmitInterval: 300 * time.Millisecond, DetectMultiplier: 3}
	d := bgpspeaker.Desired{Node: mbgp.NodeResult{Node: "n", RouterID: netip.MustParseAddr("127.0.0.2"), ASN: 64512, Sessions: []mbgp.Session{ses}}}
	if err := sp.Apply(context.Background(), d); err != nil {
		t.Fatalf("Apply with BFD's port taken: %v, want the session anyway", err)
	}
	status := func() bgpspeaker.SessionState {
		sts, _ := sp.Status(context.Background())
		if len(sts) != 1 {
			return bgpspeaker.SessionState{}
		}
		return sts[0]
	}
	waitFor(t, "the session established without BFD", func() (bool, string) {
		st := status()
		return st.State == bgpspeaker.StateEstablished && st.BFD == bgpspeaker.BFDDown, fmt.Sprintf("%+v", st)
	})
	if ok, _ := bgpspeaker.BFDStarted(g, rcv.addr); ok {
		t.Fatal("a BFD session started although its port is taken")
	}
	held.Close()
	waitFor(t, "BFD started once the port was free", func() (bool, string) {
		status() // the listing retries
		ok, sent := bgpspeaker.BFDStarted(g, rcv.addr)
		return ok && sent > 0, fmt.Sprintf("started %v, sent %d", ok, sent)
	})
	if st := status(); st.State != bgpspeaker.StateEstablished {
		t.Errorf("the session after BFD started: %+v, want it untouched", st)
	}
}
