package responder

import (
	"net/netip"
	"testing"
	"time"
)

// An interface whose sockets fail to open is Unanswered, with the error,
// and UnansweredChanges fires; a retry failing the same way fires nothing
// (the agent writes its L2Announcer on a change only); once open, or no
// longer wanted, it is answered again and the channel fires once more.
func TestManagerUnanswered(t *testing.T) {
	h := startManager(t, 3)
	if u := h.m.Unanswered(); u != nil {
		t.Fatalf("before any table: %v", u)
	}
	h.m.Apply(map[int][]netip.Addr{1: {vip4}})
	eventually(t, "interface 1 unanswered", func() bool { return h.m.Unanswered()[1] == "link not ready" })
	<-h.m.UnansweredChanges()
	eventually(t, "retry timer", h.clock.HasWaiters)
	h.clock.Step(time.Second)
	eventually(t, "open retried", func() bool { return h.net.openCount() == 2 })
	eventually(t, "retry timer", h.clock.HasWaiters)
	select {
	case <-h.m.UnansweredChanges():
		t.Fatal("a retry failing the same way signalled a change")
	default:
	}
	h.m.Apply(nil) // no longer wanted: nothing is unanswered
	eventually(t, "nothing unanswered", func() bool { return h.m.Unanswered() == nil })
	<-h.m.UnansweredChanges()
	h.m.Apply(map[int][]netip.Addr{2: {vip4}})
	eventually(t, "interface 2 unanswered", func() bool { return len(h.m.Unanswered()) == 1 })
	<-h.m.UnansweredChanges()
	eventually(t, "retry timer", h.clock.HasWaiters)
	h.clock.Step(time.Second)
	eventually(t, "open succeeded", func() bool { return h.m.Unanswered() == nil && h.net.link(2) != nil })
	<-h.m.UnansweredChanges()
}
