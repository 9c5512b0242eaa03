package membership

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// fakeKernel answers NodeCheck as the test says: whether the "node" of a
// crashed member still answers ARP.
type fakeKernel struct {
	alive atomic.Bool
	err   atomic.Pointer[error]
	asked atomic.Int32
}

func (k *fakeKernel) check(ctx context.Context, _ netip.Addr) (bool, error) {
	k.asked.Add(1)
	if e := k.err.Load(); e != nil {
		return false, *e
	}
	return k.alive.Load(), nil
}

// checkedPair runs a and b; a asks kernel about members gossip declares
// failed. b's port is fixed so that b can be restarted under it.
func checkedPair(t *testing.T, kernel *fakeKernel, loss time.Duration) (a, b *member, bcfg Config) {
	t.Helper()
	a, _ = runMember(t, Config{NodeName: "a", BindAddr: "127.0.0.1", NodeCheck: kernel.check,
		NodeCheckInterval: 50 * time.Millisecond, AgentLossTimeout: loss, Insecure: true})
	bcfg = Config{NodeName: "b", BindAddr: "127.0.0.1", BindPort: freePort(t), Insecure: true}
	b, _ = runMember(t, bcfg)
	waitFor(t, 5*time.Second, "a listening", func() bool { return a.Addr() != "" })
	b.SetPeers([]string{a.Addr()})
	waitFor(t, 5*time.Second, "a and b joined", func() bool { return len(a.Members()) == 2 && len(b.Members()) == 2 })
	return a, b, bcfg
}

func crash(m *member) { m.crashOnce.Do(func() { close(m.crash) }) }

// A member whose agent stops but whose node still answers stays a member;
// when the agent comes back (a restart under the same name), nothing has
// changed for its peers: no failure counted, no change delivered.
func TestFailedMemberWhoseNodeAnswersIsKept(t *testing.T) {
	kernel := &fakeKernel{}
	kernel.alive.Store(true)
	a, b, bcfg := checkedPair(t, kernel, time.Minute)
	drain(a)
	crash(b)
	b.stop(t)
	waitFor(t, 5*time.Second, "b held", func() bool { return value(a.met.held) == 1 })
	if got := a.Members(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Members() = %v while b's node answers", got)
	}
	b2, _ := runMember(t, bcfg)
	b2.SetPeers([]string{a.Addr()})
	waitFor(t, 10*time.Second, "b back", func() bool { return value(a.met.refuted) == 1 })
	if f, h := value(a.met.failures), value(a.met.held); f != 0 || h != 0 {
		t.Errorf("failures=%v held=%v after b came back", f, h)
	}
	if got := a.Members(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Members() = %v", got)
	}
	if kernel.asked.Load() == 0 {
		t.Error("the kernel was never asked")
	}
}

// A member whose node does not answer is dropped as soon as the check
// says so; one whose node cannot be checked is dropped too (gossip's
// verdict stands); one whose node answers but whose agent never returns is
// dropped after AgentLossTimeout.
func TestFailedMemberDropped(t *testing.T) {
	for _, tc := range []struct {
		name  string
		alive bool
		err   error
		loss  time.Duration
	}{
		{"node silent", false, nil, time.Minute},
		{"check failed", false, errors.New("no route on the segment"), time.Minute},
		{"agent never back", true, nil, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kernel := &fakeKernel{}
			kernel.alive.Store(tc.alive)
			if tc.err != nil {
				kernel.err.Store(&tc.err)
			}
			a, b, _ := checkedPair(t, kernel, tc.loss)
			drain(a)
			crash(b)
			waitFor(t, 5*time.Second, "b dropped", func() bool { return slices.Equal(a.Members(), []string{"a"}) })
			select {
			case <-a.Changes():
			case <-time.After(time.Second):
				t.Error("no change notification")
			}
			if f, h := value(a.met.failures), value(a.met.held); f != 1 || h != 0 {
				t.Errorf("failures=%v held=%v", f, h)
			}
		})
	}
}

func drain(m *member) {
	for {
		select {
		case <-m.Changes():
		default:
			return
		}
	}
}

// Metadata set on one member reaches the others, with a change
// notification; an older agent's empty metadata reads as ErrNoMeta.
func TestMetaGossiped(t *testing.T) {
	ms := startCluster(t, 3)
	drain(ms[1])
	want := NodeMeta{Ranking: "v1", Ready: true, Interfaces: []string{"eth0", "bond0"}, Defaults: []string{"bond0"}}
	if err := ms[0].SetMeta(want); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "metadata gossiped", func() bool {
		for _, mb := range ms[1].Snapshot() {
			if mb.Name == "node-1" {
				return mb.MetaErr == nil && fmt.Sprint(mb.Meta) == fmt.Sprint(want)
			}
		}
		return false
	})
	select {
	case <-ms[1].Changes():
	case <-time.After(time.Second):
		t.Error("no change notification for new metadata")
	}
	for _, mb := range ms[1].Snapshot() {
		if mb.Name == "node-3" && !errors.Is(mb.MetaErr, ErrNoMeta) {
			t.Errorf("node-3 without metadata: %v", mb.MetaErr)
		}
		if !mb.Addr.IsValid() {
			t.Errorf("%s: no address", mb.Name)
		}
	}
}

func TestNodeMetaEncoding(t *testing.T) {
	m := NodeMeta{Ranking: "mooring-hrw-v1", Ready: true, Interfaces: []string{"eth0"}, Defaults: []string{"eth0"}, Reason: "x"}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeNodeMeta(b)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(m) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if got, err := DecodeNodeMeta([]byte("leaving")); !errors.Is(err, ErrNoMeta) || !got.Leaving {
		t.Errorf("old leaving mark: %+v %v", got, err)
	}
	var many []string
	for i := range 100 {
		many = append(many, fmt.Sprintf("enp%ds0f1", i))
	}
	if _, err := (NodeMeta{Interfaces: many}).Encode(); err == nil {
		t.Error("oversized metadata encoded")
	}
}

func FuzzDecodeNodeMeta(f *testing.F) {
	b, _ := NodeMeta{Ready: true, Interfaces: []string{"eth0"}}.Encode()
	f.Add(b)
	f.Add([]byte("leaving"))
	f.Add([]byte("m{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := DecodeNodeMeta(b)
		if errors.Is(err, ErrNoMeta) != (len(b) == 0 || string(b) == metaLeaving) {
			t.Fatalf("DecodeNodeMeta(%q): %v", b, err)
		}
	})
}

// Peers are keyed by node name: a live member's other addresses (a
// dual-stack node) are not joined again, and a missing node is joined at
// its addresses of our family.
func TestNodePeersKeyedByName(t *testing.T) {
	m, err := New(Config{NodeName: "a", BindAddr: "127.0.0.1", BindPort: 7946, Insecure: true}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.addr = "10.0.0.1:7946"
	m.live = map[string]string{"a": "10.0.0.1:7946", "b": "10.0.0.2:7946", "e": "10.0.0.5:7946"}
	m.held = map[string]*held{"e": {}} // dead to gossip: joined so that it refutes
	m.SetNodePeers(map[string][]string{
		"a": {"10.0.0.1", "fd00::1"}, "b": {"10.0.0.2", "fd00::2"}, "c": {"10.0.0.3", "fd00::3"}, "d": {"fd00::4"},
		"e": {"10.0.0.5"},
	})
	if got, want := m.missingPeers(), []string{"10.0.0.3:7946", "10.0.0.5:7946", "[fd00::4]:7946"}; !slices.Equal(got, want) {
		t.Errorf("missingPeers() = %v, want %v", got, want)
	}
}

// A member dropped after AgentLossTimeout while its node still answers is
// unreachable (a gone agent, or a gossip partition) until its node stops
// answering or it rejoins.
func TestUnreachable(t *testing.T) {
	kernel := &fakeKernel{}
	kernel.alive.Store(true)
	a, b, bcfg := checkedPair(t, kernel, 300*time.Millisecond)
	crash(b)
	b.stop(t)
	waitFor(t, 5*time.Second, "b unreachable", func() bool { return slices.Equal(a.Unreachable(), []string{"b"}) })
	if got := a.Members(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Members() = %v", got)
	}
	b2, _ := runMember(t, bcfg)
	b2.SetPeers([]string{a.Addr()})
	waitFor(t, 5*time.Second, "b back", func() bool { return len(a.Members()) == 2 && len(a.Unreachable()) == 0 })
	crash(b2)
	b2.stop(t)
	waitFor(t, 5*time.Second, "b unreachable again", func() bool { return slices.Equal(a.Unreachable(), []string{"b"}) })
	kernel.alive.Store(false)
	waitFor(t, 5*time.Second, "b's node gone: no longer unreachable", func() bool { return len(a.Unreachable()) == 0 })
}

// A held member whose node answered is listed by Held (with a change
// delivered: the agent's partition rule reads it) and, when released,
// becomes unreachable at once instead of after AgentLossTimeout.
func TestHeldAndRelease(t *testing.T) {
	kernel := &fakeKernel{}
	kernel.alive.Store(true)
	a, b, _ := checkedPair(t, kernel, time.Minute)
	crash(b)
	b.stop(t)
	waitFor(t, 5*time.Second, "b held and checked", func() bool { return slices.Equal(a.Held(), []string{"b"}) })
	if a.Release("nobody") {
		t.Error("released a member that is not held")
	}
	if !a.Release("b") {
		t.Fatal("b not released")
	}
	if got, u := a.Members(), a.Unreachable(); !slices.Equal(got, []string{"a"}) || !slices.Equal(u, []string{"b"}) || len(a.Held()) != 0 {
		t.Fatalf("after release: members %v, unreachable %v, held %v", got, u, a.Held())
	}
}
