package frr

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// Client queries and configures a running router through vtysh and the
// daemons' vty sockets in Dir. It needs no namespace: the sockets are
// files, so it works from any process on the machine — `mooring failover`
// and `mooring lab exec router -- vtysh` reach the lab's router this way.
type Client struct {
	// Dir holds the daemons' vty sockets (Instance.Dir; `vtysh
	// --vty_socket <Dir>`).
	Dir string
}

// Vtysh runs vtysh with one -c per command and returns its output. vtysh
// talks to the daemons over their sockets, so it runs in this process's
// namespace.
func (c Client) Vtysh(ctx context.Context, cmds ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, vtyshTimeout)
	defer cancel()
	args := []string{"--vty_socket", c.Dir}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, vtyshPath, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("frr: vtysh %q: %w: %s", cmds, err, strings.TrimSpace(stderr.String()+" "+stdout.String()))
	}
	// vtysh exits 0 on some command errors, printing "% ...".
	if o := bytes.TrimSpace(stdout.Bytes()); bytes.HasPrefix(o, []byte("% ")) {
		return nil, fmt.Errorf("frr: vtysh %q: %s", cmds, o)
	}
	return stdout.Bytes(), nil
}

// Configure applies configuration lines (as typed after `configure
// terminal`, e.g. "router bgp 64500", " neighbor 10.0.0.9 remote-as 64512")
// to the running daemons, without a restart.
func (c Client) Configure(ctx context.Context, lines ...string) error {
	_, err := c.Vtysh(ctx, append([]string{"configure terminal"}, lines...)...)
	return err
}

// RIB returns zebra's routes of family f: what the kernel got.
func (c Client) RIB(ctx context.Context, f Family) (RIB, error) {
	cmd := "show ip route json"
	if f == IPv6 {
		cmd = "show ipv6 route json"
	}
	out, err := c.Vtysh(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return ParseRIB(out)
}

// BGPTable returns bgpd's paths of family f.
func (c Client) BGPTable(ctx context.Context, f Family) (BGPTable, error) {
	out, err := c.Vtysh(ctx, "show bgp "+f.String()+" unicast json")
	if err != nil {
		return nil, err
	}
	return ParseBGPTable(out)
}

// BGPPrefix returns every path of p with its attributes (communities,
// LOCAL_PREF); nil when the router has none.
func (c Client) BGPPrefix(ctx context.Context, p netip.Prefix) ([]Path, error) {
	f := IPv4
	if p.Addr().Is6() {
		f = IPv6
	}
	out, err := c.Vtysh(ctx, fmt.Sprintf("show bgp %s unicast %s json", f, p))
	if err != nil {
		return nil, err
	}
	return ParseBGPPrefix(out)
}

// Sessions returns every neighbour's session, keyed by address.
func (c Client) Sessions(ctx context.Context) (map[netip.Addr]Session, error) {
	out, err := c.Vtysh(ctx, "show bgp neighbors json")
	if err != nil {
		return nil, err
	}
	return ParseSessions(out)
}

// BFDPeers returns every BFD session.
func (c Client) BFDPeers(ctx context.Context) ([]BFDPeer, error) {
	out, err := c.Vtysh(ctx, "show bfd peers json")
	if err != nil {
		return nil, err
	}
	return ParseBFDPeers(out)
}
