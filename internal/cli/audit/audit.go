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
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/arpprobe"
	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab"
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
		iface, kubeconfig string
		wait              time.Duration
	)
	cmd := &cobra.Command{
		Use:   "arp ADDRESS...",
		Short: "Send one ARP request / neighbour solicitation per address and list every responder",
		Long: `Sends ONE ARP request (IPv4) or neighbour solicitation (IPv6) per address on the
given interface and lists every MAC that answers within --wait. Exactly one
responder is healthy; none means nobody announces the address; more than one
means a split: a stale copy of the address on some node's interface with
arp_ignore=0 (e.g. a leftover kube-ipvs0), or two announcers. Exits 1 unless
every address has exactly one responder. Needs CAP_NET_RAW.

Each MAC is followed by the name of its machine when the audit can tell:
from a running lab's state ($MOORING_LAB_DIR, default /run/mooring-lab), else
by asking the segment who answers for each Node's InternalIP (the cluster is
found as for every command: --kubeconfig, $KUBECONFIG, in-cluster; without
one, MACs stay bare). See docs/audit.md.`,
		Example: `  mooring audit arp -i eth0 10.213.0.100 fd00:213::100
  mooring lab exec client -- mooring audit arp -i eth0 10.213.0.100`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cliutil.Usagef("give the addresses to check: mooring audit arp -i IFACE ADDRESS...")
			}
			return nil
		},
		PreRunE: func(_ *cobra.Command, args []string) error {
			switch {
			case iface == "":
				return errors.New("--interface is required: the interface on the Service addresses' segment, e.g. --interface eth0")
			case wait <= 0:
				return fmt.Errorf("--wait %s: must be positive", wait)
			}
			_, err := parseAddrs(args)
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
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
			names := nodeNames(cmd.Context(), deps, kubeconfig, ifi, src, wait, results)
			if err := Print(deps.Streams.Out, results, names); err != nil {
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
	cliutil.AddKubeconfigFlag(cmd, &kubeconfig)
	return cmd
}

// Result is what one probe found.
type Result struct {
	Addr       netip.Addr
	Responders []net.HardwareAddr
}

// Verdict explains a result in words an operator can act on.
func (r Result) Verdict() string { return r.verdict(nil) }

// verdict is Verdict with the responders' machines named where names
// knows them.
func (r Result) verdict(names map[string]string) string {
	switch n := len(r.Responders); n {
	case 0:
		return "nobody answers: no node announces it (is the Service selected by an L2AnnouncementPolicy, and does an agent run on this segment?)"
	case 1:
		return "ok"
	}
	var who []string
	for _, m := range r.Responders {
		if name, ok := names[m.String()]; ok {
			who = append(who, name)
		}
	}
	where := "find the node with each MAC and look"
	if len(who) == len(r.Responders) {
		slices.Sort(who) // answers arrive in any order
		where = "on " + strings.Join(who, " and ") + ", look"
	}
	return fmt.Sprintf("SPLIT: %d responders; %s for the address on a local interface (ip -br addr | grep %s) with arp_ignore=0 (sysctl net.ipv4.conf.all.arp_ignore), e.g. a stale kube-ipvs0, or for a second announcer", len(r.Responders), where, r.Addr)
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

// nodeNames names the responders' MACs from the lab's state, then from the
// cluster's Nodes; a failure costs only the names, so it is a warning.
func nodeNames(ctx context.Context, deps *cliutil.Deps, kubeconfig string, ifi *net.Interface, src map[bool]netip.Addr, wait time.Duration, results []Result) map[string]string {
	var macs []net.HardwareAddr
	for _, r := range results {
		macs = append(macs, r.Responders...)
	}
	if len(macs) == 0 {
		return nil
	}
	sources := []NodeMACs{LabMACs{Dir: lab.StateDirFromEnv()}}
	rest, err := kube.RESTConfig(kubeconfig, 5, 10)
	switch {
	case errors.Is(err, kube.ErrNoConfig):
	case err != nil:
		fmt.Fprintf(deps.Streams.Err, "warning: MACs are not named: %v\n", err)
	default:
		cs, err := kubernetes.NewForConfig(rest)
		if err != nil {
			fmt.Fprintf(deps.Streams.Err, "warning: MACs are not named: %v\n", err)
			break
		}
		sources = append(sources, APIMACs{Client: cs, Local: slices.Collect(maps.Values(src)), LocalMAC: ifi.HardwareAddr,
			Probe: func(ctx context.Context, addrs []netip.Addr) (arpprobe.Result, error) {
				return arpprobe.ProbeInterface(ctx, ifi, addrs, arpprobe.Options{Src4: src[false], Src6: src[true], Wait: wait})
			}})
	}
	names, err := nameMACs(ctx, macs, sources...)
	if err != nil {
		fmt.Fprintf(deps.Streams.Err, "warning: some MACs are not named: %v\n", err)
	}
	return names
}

// Print writes results as a table; names (may be nil) names MACs.
func Print(w io.Writer, results []Result, names map[string]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ADDRESS\tRESPONDERS\tMACS\tVERDICT")
	for _, r := range results {
		macs := make([]string, len(r.Responders))
		for i, m := range r.Responders {
			macs[i] = m.String()
			if n, ok := names[m.String()]; ok {
				macs[i] += " (" + n + ")"
			}
		}
		list := strings.Join(macs, ",")
		if list == "" {
			list = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.Addr, len(r.Responders), list, r.verdict(names))
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
