package responder

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"
)

// Config.Silent (the agent's stall gate): while it says so, requests for
// owned addresses get no reply and no announcement leaves; afterwards the
// link answers again.
func TestSilentSendsNothing(t *testing.T) {
	var silent atomic.Bool
	silent.Store(true)
	n := &fakeNet{links: map[int]*Link{}}
	m := NewWithOpener(Config{GratuitousCount: 1, Clock: clocktesting.NewFakeClock(time.Unix(1e9, 0)), Silent: silent.Load},
		nil, prometheus.NewRegistry(), n.open)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	m.Apply(map[int][]netip.Addr{1: {vip4}})
	eventually(t, "link open", func() bool { return n.link(1) != nil })
	l := n.link(1)
	conn(l.ARP).in <- arpRequest(t, clientMAC, client4, vip4, nil)
	eventually(t, "request counted", func() bool {
		return value(m.met.requests.WithLabelValues(familyIPv4, l.Name, "true")) == 1
	})
	if got := len(conn(l.ARP).written()); got != 0 {
		t.Fatalf("%d frames sent while silent", got)
	}
	silent.Store(false)
	conn(l.ARP).in <- arpRequest(t, clientMAC, client4, vip4, nil)
	eventually(t, "a reply once no longer silent", func() bool { return len(conn(l.ARP).written()) == 1 })
}
