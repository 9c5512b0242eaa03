// Package audit is the `mooring audit` verb: checks an operator runs on a
// node before trusting an L2 handover. `mooring audit arp` finds EVERY
// machine that answers ARP/NDP for an address — the field notes' trap, where
// a forgotten kube-ipvs0 made all seven nodes answer and leader election
// became decoration.
package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/arpprobe"
	"github.com/mooringlb/mooring/internal/cliutil"
)

// NewCommand builds `mooring audit`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Check the network the way an operator should before trusting it",
	}
	cmd.AddCommand(newARPCommand(deps))
	return cmd
}

func newARPCommand(deps *cliutil.Deps) *cobra.Command {
	var (
		iface string
		wait  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "arp ADDRESS...",
		Short: "Send one ARP request / neighbour solicitation per address and list every responder",
		Long: `Sends ONE ARP request (IPv4) or neighbour solicitation (IPv6) per address on the
given interface and lists every MAC that answers within --wait. Exactly one
responder is healthy; none means nobody announces the address; more than one
means a split: a stale copy of the address on some node's interface with
arp_ignore=0 (e.g. a leftover kube-ipvs0), or two announcers. Exits 1 unless
every address has exactly one responder. Needs CAP_NET_RAW.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if iface == "" {
				return errors.New("--interface is required: the interface on the Service addresses' segment, e.g. --interface eth0")
			}
			addrs, err := parseAddrs(args)
			if err != nil {
				return err
			}
			ifi, err := net.InterfaceByName(iface)
			if err != nil {
				return fmt.Errorf("interface %q: %w (list them with `ip -br link`)", iface, err)
			}
			src, err := sources(ifi)
			if err != nil {
				return err
			}
			results := make([]Result, 0, len(addrs))
			for _, a := range addrs {
				r, err := ProbeOne(cmd.Context(), ifi, src, a, wait)
				if err != nil {
					return err
				}
				results = append(results, r)
			}
			if err := Print(deps.Streams.Out, results); err != nil {
				return err
			}
			for _, r := range results {
				if len(r.Responders) != 1 {
					return cliutil.ExitError{Code: 1}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&iface, "interface", "i", "", "interface to probe on (required)")
	cmd.Flags().DurationVar(&wait, "wait", time.Second, "how long to collect answers per address")
	return cmd
}

// Result is what one probe found.
type Result struct {
	Addr       netip.Addr
	Responders []net.HardwareAddr
}

// Verdict explains a result in words an operator can act on.
func (r Result) Verdict() string {
	switch n := len(r.Responders); n {
	case 0:
		return "nobody answers: no node announces it (is the Service selected by an L2AnnouncementPolicy, and does an agent run on this segment?)"
	case 1:
		return "ok"
	default:
		return fmt.Sprintf("SPLIT: %d responders; find the node with each MAC and look for the address on a local interface (ip -br addr | grep %s) with arp_ignore=0 (sysctl net.ipv4.conf.all.arp_ignore), e.g. a stale kube-ipvs0", n, r.Addr)
	}
}

// ProbeOne probes addr from ifi, using the source address of its family.
// Every answer addressed to ifi counts, this node's own included: the
// audit wants every machine that claims the address.
func ProbeOne(ctx context.Context, ifi *net.Interface, src map[bool]netip.Addr, addr netip.Addr, wait time.Duration) (Result, error) {
	got, err := arpprobe.ProbeInterface(ctx, ifi, []netip.Addr{addr}, arpprobe.Options{
		Src4: src[false], Src6: src[true], Wait: wait,
	})
	if err != nil {
		return Result{}, fmt.Errorf("probe %s on %s: %w", addr, ifi.Name, err)
	}
	return Result{Addr: addr, Responders: got.MACs(addr)}, nil
}

// Print writes results as a table.
func Print(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ADDRESS\tRESPONDERS\tMACS\tVERDICT")
	for _, r := range results {
		macs := make([]string, len(r.Responders))
		for i, m := range r.Responders {
			macs[i] = m.String()
		}
		list := strings.Join(macs, ",")
		if list == "" {
			list = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.Addr, len(r.Responders), list, r.Verdict())
	}
	return tw.Flush()
}

func parseAddrs(args []string) ([]netip.Addr, error) {
	out := make([]netip.Addr, 0, len(args))
	for _, a := range args {
		addr, err := netip.ParseAddr(strings.TrimSpace(a))
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address: give addresses such as 192.0.2.10 or 2001:db8::10", a)
		}
		out = append(out, addr.Unmap())
	}
	return out, nil
}

// sources picks the interface's first IPv4 and first global-or-link-local
// IPv6 address as probe senders (keyed by "is IPv6"). A family without an
// address probes with the unspecified sender, which is still answered.
func sources(ifi *net.Interface) (map[bool]netip.Addr, error) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", ifi.Name, err)
	}
	src := map[bool]netip.Addr{}
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := p.Addr().Unmap()
		if _, ok := src[ip.Is6()]; !ok {
			src[ip.Is6()] = ip
		}
	}
	return src, nil
}
