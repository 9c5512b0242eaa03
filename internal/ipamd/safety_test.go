package ipamd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func key(network, id string) Key { return Key{Network: network, ContainerID: id, IfName: "eth0"} }

// Issue 19 item 6: a GC frees only its own network's allocations, and
// nothing at all when it does not say what is in use.
func TestGCIsPerNetworkAndNeedsTheValidList(t *testing.T) {
	a, st := open(t, t.TempDir())
	defer st.Close()
	ctx := context.Background()
	for _, k := range []Key{key("pods", "c1"), key("pods", "c2"), key("storage", "c1"), key("storage", "c3")} {
		if _, err := a.Add(ctx, AddRequest{Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	if freed, err := a.GC("pods", nil); err == nil || len(freed) != 0 || !strings.Contains(err.Error(), "without cni.dev/valid-attachments frees nothing") {
		t.Fatalf("GC without a list: freed %v, err %v", freed, err)
	}
	if freed, err := a.GC("", []Key{}); err == nil || len(freed) != 0 || !strings.Contains(err.Error(), "without the network's name") {
		t.Fatalf("GC without a network: freed %v, err %v", freed, err)
	}
	// pods' GC lists only c1: c2 goes, storage's c3 (not in pods' list)
	// and storage's c1 stay.
	freed, err := a.GC("pods", []Key{{ContainerID: "c1", IfName: "eth0"}})
	if err != nil || len(freed) != 1 || freed[0].Key != key("pods", "c2") {
		t.Fatalf("GC of pods: freed %v, err %v", freed, err)
	}
	if got := keys(a.All()); got != "pods/c1 storage/c1 storage/c3" {
		t.Fatalf("left %s", got)
	}
	// An empty list frees every allocation of the network, and only them.
	if freed, err := a.GC("storage", []Key{}); err != nil || len(freed) != 2 {
		t.Fatalf("GC of storage with an empty list: freed %v, err %v", freed, err)
	}
	if got := keys(a.All()); got != "pods/c1" {
		t.Fatalf("left %s", got)
	}
}

func keys(als []Allocation) string {
	var out []string
	for _, al := range als {
		out = append(out, al.Network+"/"+al.ContainerID)
	}
	return strings.Join(out, " ")
}

// Issue 19 item 6: a node upgraded from keys without the network keeps
// every allocation; the first request naming an old attachment with its
// network adopts it (ADD returns it, DEL frees it, CHECK finds it), a GC
// adopts the old ones its list names and keeps the others (they may be
// another network's), and the adoption survives a restart.
func TestUpgradeKeepsAllocationsWithoutNetwork(t *testing.T) {
	dir := t.TempDir()
	var journal bytes.Buffer
	for i, id := range []string{"kept", "deleted", "checked", "listed", "unlisted"} {
		fmt.Fprintf(&journal, `{"put":{"containerID":%q,"ifName":"eth0","pool":"default","ips":[{"address":"10.244.1.%d/29","gateway":"10.244.1.1"}]}}`+"\n", id, i+2)
	}
	if err := os.WriteFile(filepath.Join(dir, journalFile), journal.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	a, st := open(t, dir)
	ctx := context.Background()
	if got := len(a.All()); got != 5 {
		t.Fatalf("loaded %d allocations, want 5", got)
	}
	al, err := a.Add(ctx, AddRequest{Key: key("pods", "kept")})
	if err != nil || al.IPs[0].Address.String() != "10.244.1.2/29" || al.Key != key("pods", "kept") {
		t.Fatalf("ADD of an old attachment: %+v, %v", al, err)
	}
	if err := a.Del(key("pods", "deleted")); err != nil {
		t.Fatal(err)
	}
	if al, err := a.Get(key("pods", "checked")); err != nil || al.Network != "pods" {
		t.Fatalf("CHECK of an old attachment: %+v, %v", al, err)
	}
	freed, err := a.GC("pods", []Key{{ContainerID: "listed", IfName: "eth0"}, {ContainerID: "kept", IfName: "eth0"}, {ContainerID: "checked", IfName: "eth0"}})
	if err != nil || len(freed) != 0 {
		t.Fatalf("GC freed %v, %v: the unlisted old allocation may be another network's", freed, err)
	}
	want := "/unlisted pods/checked pods/kept pods/listed"
	if got := keys(a.All()); got != want {
		t.Fatalf("after the requests: %s, want %s", got, want)
	}
	// The deleted one's address is free again; none of the others' is.
	fresh, err := a.Add(ctx, AddRequest{Key: key("pods", "new")})
	if err != nil || fresh.IPs[0].Address.String() != "10.244.1.3/29" {
		t.Fatalf("new pod got %+v, %v; want the deleted pod's 10.244.1.3", fresh, err)
	}
	st.Close()
	b, st2 := open(t, dir)
	defer st2.Close()
	if got := keys(b.All()); got != "/unlisted pods/checked pods/kept pods/listed pods/new" {
		t.Fatalf("after a restart: %s", got)
	}
}

// Issue 19 item 5: a request carries the plugin's deadline. An ADD whose
// pool lookup outlasts it is abandoned, never completed after the plugin
// gave up, and the lookup sees the deadline.
func TestAddEndsWithThePluginsDeadline(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenFileStore(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lookups := make(chan error, 1)
	a, err := NewAllocator(st, func(ctx context.Context, _, _ string) (string, error) {
		select {
		case <-ctx.Done(): // the API call sees the deadline
			lookups <- ctx.Err()
			return "", fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		case <-time.After(3 * time.Second): // an API server this slow
			lookups <- nil
			return "default", nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	a.SetPools(dual())
	sock := filepath.Join(dir, "s.sock")
	calls := make(chan CallTimes, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&Server{Alloc: a, Socket: sock, Observe: func(c CallTimes) { calls <- c }}).Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitSocket(t, sock)
	_, err = NewClient(sock).WithTimeout(300*time.Millisecond).Add(context.Background(), AddRequest{Key: key("pods", "slow"), Namespace: "ns", Pod: "p"})
	var un *UnreachableError
	if !errors.As(err, &un) {
		t.Fatalf("ADD past the deadline: %v, want the plugin's timeout", err)
	}
	if lerr := <-lookups; !errors.Is(lerr, context.DeadlineExceeded) {
		t.Fatalf("the pool lookup did not see the plugin's deadline (it ran to the end: %v)", lerr)
	}
	c := <-calls
	if c.Handled.Sub(c.Accepted) > 2*time.Second {
		t.Fatalf("the call took %s, past the plugin's 300ms", c.Handled.Sub(c.Accepted))
	}
	if all := a.All(); len(all) != 0 {
		t.Fatalf("an ADD the plugin gave up on allocated %+v", all)
	}
}

// Issue 19 item 5: a request larger than MaxRequestBytes is refused before
// it is read whole.
func TestRequestSizeIsLimited(t *testing.T) {
	dir := t.TempDir()
	a, st := open(t, filepath.Join(dir, "store"))
	defer st.Close()
	if _, err := a.Add(context.Background(), AddRequest{Key: key("pods", "c1")}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&Server{Alloc: a, Socket: sock}).Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitSocket(t, sock)
	// A well-formed GC whose list is larger than the limit: served, it
	// would free c1.
	req := Request{Op: OpGC, GC: &GCRequest{Network: "pods", Valid: []Key{}}}
	for i := 0; len(req.GC.Valid)*60 < MaxRequestBytes+1024; i++ {
		req.GC.Valid = append(req.GC.Valid, Key{ContainerID: fmt.Sprintf("padding-%050d", i), IfName: "eth0"})
	}
	body, _ := json.Marshal(req)
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	go func() { _, _ = conn.Write(body) }() // the server stops reading
	var resp Response
	if err := json.NewDecoder(conn).Decode(&resp); err != nil {
		t.Fatal(err)
	}
	if resp.Error == nil || resp.Error.Kind != KindBad || !strings.Contains(resp.Error.Message, "larger than") {
		t.Fatalf("answer %+v, want a bad-request naming the size", resp)
	}
	if len(a.All()) != 1 {
		t.Fatal("the oversized GC was served")
	}
}

func waitSocket(t *testing.T, sock string) {
	t.Helper()
	for range 400 {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("ipamd socket never came up")
}
