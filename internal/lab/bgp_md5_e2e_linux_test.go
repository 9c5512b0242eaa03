package lab_test

import (
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/netlab"
)

// The BGP lab's sessions are TCP-MD5 (lab.DefaultBGPPassword): what the
// tests check of it.

// envPasswordCheckTheCheck=1 makes TestLabBGPAPIServerStopped remove the
// kept passwords from the restarted agent's state file before it starts:
// the test must then fail (the agent cannot read the Secret while the API
// server is stopped, so its session stays closed: no End-of-RIB).
const envPasswordCheckTheCheck = "MOORING_BGP_PASSWORD_CHECK_THE_CHECK"

// bgpPort is where the router's bgpd listens.
const bgpPort = 179

// checkMD5 proves the router's sessions with the nodes are TCP-MD5: the
// router's kernel answers a plain TCP SYN to bgpd from the client (its
// address has no key) but drops one from node's address without a word
// (RFC 2385: a segment without the expected MD5 option is discarded), so
// the Established session with node must be signed; and FRR says the
// neighbour has a password.
func (b *bgpLab) checkMD5(node string) {
	b.t.Helper()
	router := b.r.Cluster.Host(lab.RouterHost).Addr4
	probe := func(from *netlab.Host) (time.Duration, error) {
		t0 := time.Now()
		var c net.Conn
		err := from.Do(func() error {
			var err error
			c, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(b.ctx, "tcp", netip.AddrPortFrom(router, bgpPort).String())
			return err
		})
		if c != nil {
			c.Close()
		}
		return time.Since(t0), err
	}
	// The probe works: from an address without a key, bgpd's socket
	// accepts (and bgpd then drops the stranger).
	if _, err := probe(b.r.Cluster.Host(netlab.ClientName)); err != nil {
		b.t.Fatalf("a plain TCP connection from the client to the router's bgpd failed: %v (the MD5 probe below would prove nothing)", err)
	}
	took, err := probe(b.r.Cluster.Host(node))
	var ne net.Error
	switch {
	case err == nil:
		b.t.Errorf("the router accepted a plain TCP connection from %s's address: its sessions with the nodes are not TCP-MD5", node)
	case !errors.As(err, &ne) || !ne.Timeout():
		b.t.Errorf("a plain TCP connection from %s to the router: %v, want no answer at all (its kernel drops unsigned SYNs)", node, err)
	default:
		b.t.Logf("TCP-MD5: the router answered a plain SYN from the client, and none from %s within %s", node, took.Round(time.Millisecond))
	}
	out, err := b.router.Vtysh(b.ctx, "show bgp neighbors "+b.addr4[node].String()+" json")
	if err != nil {
		b.t.Fatal(err)
	}
	var raw map[string]map[string]any
	if err := json.Unmarshal(out, &raw); err != nil {
		b.t.Fatal(err)
	}
	// FRR 8.4 adds authenticationEnabled: 1 to a neighbour with a
	// password, and leaves it out otherwise.
	if v := raw[b.addr4[node].String()]["authenticationEnabled"]; v != float64(1) && v != true {
		b.t.Errorf("FRR's neighbour %s has authenticationEnabled %v, want 1 (a password)", node, v)
	}
}

// stateFile is node's agent's BGP state file in the lab's state dir.
func (b *bgpLab) stateFile(node string) string {
	return filepath.Join(filepath.Dir(b.r.Kubeconfig), "agent-state", node, "bgp-state.json")
}

// keptPasswords checks that node's stopped agent kept the router's
// password in its state file and, with envPasswordCheckTheCheck, removes
// it (the new agent then has none while the API server is stopped).
func (b *bgpLab) keptPasswords(node string) {
	b.t.Helper()
	path := b.stateFile(node)
	raw, err := os.ReadFile(path)
	if err != nil {
		b.t.Fatal(err)
	}
	var st map[string]json.RawMessage
	if err := json.Unmarshal(raw, &st); err != nil {
		b.t.Fatal(err)
	}
	var pws map[string]string
	_ = json.Unmarshal(st["passwords"], &pws)
	if len(pws) == 0 {
		b.t.Errorf("%s's agent kept no password in %s", node, path)
	}
	if os.Getenv(envPasswordCheckTheCheck) != "1" {
		return
	}
	b.t.Logf("%s=1: removing the kept passwords from %s's state file; this test must fail", envPasswordCheckTheCheck, node)
	delete(st, "passwords")
	if raw, err = json.Marshal(st); err == nil {
		err = os.WriteFile(path, raw, 0o600)
	}
	if err != nil {
		b.t.Fatal(err)
	}
}
