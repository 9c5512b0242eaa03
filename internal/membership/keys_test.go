package membership

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

func keyFile(t *testing.T, keys ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gossip.key")
	writeKeys(t, p, keys...)
	return p
}

func writeKeys(t *testing.T, path string, keys ...string) {
	t.Helper()
	var lines []string
	for _, k := range keys {
		lines = append(lines, base64.StdEncoding.EncodeToString([]byte(k)))
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte("# gossip keys\n"+strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // atomic, as a Secret volume update
		t.Fatal(err)
	}
}

const (
	key1 = "0123456789abcdef0123456789abcdef"
	key2 = "fedcba9876543210fedcba9876543210"
)

// Members sharing the key join; one without it, or with another key,
// cannot join, so it can neither claim a node's name nor spread "dead"
// messages about one.
func TestGossipKeyRequired(t *testing.T) {
	path := keyFile(t, key1)
	a, _ := runMember(t, Config{NodeName: "a", BindAddr: "127.0.0.1", KeyFile: path})
	b, _ := runMember(t, Config{NodeName: "b", BindAddr: "127.0.0.1", KeyFile: path})
	waitFor(t, 5*time.Second, "listening", func() bool { return a.Addr() != "" && b.Addr() != "" })
	b.SetPeers([]string{a.Addr()})
	waitFor(t, 5*time.Second, "a and b joined", func() bool { return len(a.Members()) == 2 })

	noKey, _ := runMember(t, Config{NodeName: "b", BindAddr: "127.0.0.1", RejoinInterval: 100 * time.Millisecond})
	wrongKey, _ := runMember(t, Config{NodeName: "c", BindAddr: "127.0.0.1", RejoinInterval: 100 * time.Millisecond, KeyFile: keyFile(t, key2)})
	noKey.SetPeers([]string{a.Addr()})
	wrongKey.SetPeers([]string{a.Addr(), b.Addr()})
	time.Sleep(time.Second) // ~10 join attempts each
	for _, m := range []*member{a, b} {
		if got := m.Members(); !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("%s sees %v: an unkeyed member got in", m.cfg.NodeName, got)
		}
	}
	if got := noKey.Members(); len(got) != 1 {
		t.Errorf("the unkeyed member sees %v", got)
	}
	if value(noKey.met.insecure) != 1 || value(a.met.insecure) != 0 {
		t.Errorf("mooring_members_insecure: unkeyed %v, keyed %v; want 1 and 0", value(noKey.met.insecure), value(a.met.insecure))
	}
	if got := wrongKey.Members(); len(got) != 1 {
		t.Errorf("the member with another key sees %v", got)
	}
}

// Rotation without a partition: the file gains the new key first (members
// send with it and still accept the old), then loses the old one; a member
// started with only the new key joins.
func TestGossipKeyRotation(t *testing.T) {
	path := keyFile(t, key1)
	cfg := func(name string) Config {
		return Config{NodeName: name, BindAddr: "127.0.0.1", KeyFile: path, KeyReloadInterval: 50 * time.Millisecond}
	}
	a, _ := runMember(t, cfg("a"))
	b, _ := runMember(t, cfg("b"))
	waitFor(t, 5*time.Second, "listening", func() bool { return a.Addr() != "" && b.Addr() != "" })
	b.SetPeers([]string{a.Addr()})
	waitFor(t, 5*time.Second, "a and b joined", func() bool { return len(a.Members()) == 2 })

	writeKeys(t, path, key2, key1)
	time.Sleep(300 * time.Millisecond)
	writeKeys(t, path, key2)
	c, _ := runMember(t, Config{NodeName: "c", BindAddr: "127.0.0.1", KeyFile: keyFile(t, key2)})
	waitFor(t, 5*time.Second, "c listening", func() bool { return c.Addr() != "" })
	c.SetPeers([]string{a.Addr()})
	waitFor(t, 5*time.Second, "c joined with the new key", func() bool { return len(a.Members()) == 3 && len(c.Members()) == 3 })
	if f := value(a.met.failures) + value(b.met.failures); f != 0 {
		t.Errorf("%v failures during rotation", f)
	}
}

func TestReadKeysErrors(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"empty": "# nothing\n\n", "not base64": "not a key!\n", "short": base64.StdEncoding.EncodeToString([]byte("short")),
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readKeys(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := readKeys(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}

// installKeys makes the keyring what the file says: added keys, the new
// primary, and no key that left the file.
func TestInstallKeysRevokes(t *testing.T) {
	k1, k2, k3 := []byte(key1), []byte(key2), []byte("0123456789abcdef")
	kr, err := memberlist.NewKeyring([][]byte{k1, k2}, k1)
	if err != nil {
		t.Fatal(err)
	}
	added, removed, primary, err := installKeys(kr, [][]byte{k3, k1})
	if err != nil || added != 1 || removed != 1 || !primary {
		t.Fatalf("installKeys: added %d removed %d primary %v err %v, want 1 1 true", added, removed, primary, err)
	}
	if got := kr.GetKeys(); len(got) != 2 || !bytes.Equal(got[0], k3) || !bytes.Equal(got[1], k1) {
		t.Errorf("keys %q, want [k3 k1]", got)
	}
	if added, removed, primary, err := installKeys(kr, [][]byte{k3, k1}); added+removed != 0 || primary || err != nil {
		t.Errorf("the same keys again changed something: %d %d %v %v", added, removed, primary, err)
	}
}

// A leaked key is revoked by removing it from the file: within one reload
// the members that re-read it stop understanding a member that holds only
// that key. It is dropped (it cannot be heard: its packets no longer
// decrypt), it cannot join again, and a new member holding it cannot join.
// (With the revoked key still accepted, each of its join attempts would
// bring it back: its push/pull would still be read.)
func TestRevokedGossipKey(t *testing.T) {
	path := keyFile(t, key2) // the key in use leaks
	cfg := func(name string) Config {
		return Config{NodeName: name, BindAddr: "127.0.0.1", KeyFile: path, KeyReloadInterval: 50 * time.Millisecond}
	}
	aLog := &lockedBuffer{}
	a := runLogged(t, cfg("a"), aLog)
	b, _ := runMember(t, cfg("b"))
	leaked := func(name string) (*member, *lockedBuffer) {
		logs := &lockedBuffer{}
		return runLogged(t, Config{NodeName: name, BindAddr: "127.0.0.1", KeyFile: keyFile(t, key2), RejoinInterval: 100 * time.Millisecond}, logs), logs
	}
	c, cLog := leaked("c")
	waitFor(t, 5*time.Second, "listening", func() bool { return a.Addr() != "" && b.Addr() != "" && c.Addr() != "" })
	b.SetPeers([]string{a.Addr()})
	c.SetPeers([]string{a.Addr(), b.Addr()})
	waitFor(t, 5*time.Second, "c joined with key2", func() bool { return len(a.Members()) == 3 && len(c.Members()) == 3 })

	writeKeys(t, path, key1) // a new key; the leaked one revoked
	waitFor(t, 5*time.Second, "a and b drop c", func() bool {
		return slices.Equal(a.Members(), []string{"a", "b"}) && slices.Equal(b.Members(), []string{"a", "b"})
	})
	joins := value(a.met.joins) + value(b.met.joins)
	d, dLog := leaked("d")
	waitFor(t, 5*time.Second, "d listening", func() bool { return d.Addr() != "" })
	d.SetPeers([]string{a.Addr()})
	// c keeps rejoining (its peers are configured) and d tries for the
	// first time: wait until each failed several times, and a could not
	// decrypt what they sent.
	waitFor(t, 10*time.Second, "failed join attempts of c and d", func() bool {
		return strings.Count(cLog.String(), "join attempt incomplete") >= 3 && strings.Count(dLog.String(), "join attempt incomplete") >= 3
	})
	if !strings.Contains(aLog.String(), "no installed keys could decrypt") {
		t.Error("a logged no undecryptable message from c or d")
	}
	if got := a.Members(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("a sees %v after the revocation", got)
	}
	if j := value(a.met.joins) + value(b.met.joins); j != joins {
		t.Errorf("%v joins seen by a and b after the revocation, want none", j-joins)
	}
	if got := d.Members(); len(got) != 1 {
		t.Errorf("d, holding only the revoked key, sees %v", got)
	}
}

// runLogged runs a member that logs everything, debug included, to w.
func runLogged(t *testing.T, cfg Config, w *lockedBuffer) *member {
	t.Helper()
	m, err := New(cfg, slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	mb := &member{Membership: m, cancel: cancel, done: make(chan error, 1)}
	go func() { mb.done <- m.Run(ctx) }()
	t.Cleanup(func() { mb.stop(t) })
	return mb
}

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
