package membership

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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
