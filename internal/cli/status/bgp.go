package status

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mooringlb/mooring/internal/bgpagent"
)

// ReasonNotAdvertised: the BGP decision advertises the address, but no
// node's session that carries it is Established (the nodes' BGPSpeakers).
const ReasonNotAdvertised = "NotAdvertised"

// BGPFromAPI reads what the agents advertise over BGP through r
// (bgpagent.ReadAdvertised: every node's decision recomputed from the API
// objects, and the nodes' BGPSpeakers).
func BGPFromAPI(r client.Reader) func(context.Context) (bgpagent.Advertised, error) {
	return func(ctx context.Context) (bgpagent.Advertised, error) { return bgpagent.ReadAdvertised(ctx, r) }
}

// Advertisement says who advertises one address over BGP now.
type Advertisement struct {
	Address string `json:"address"`
	// Nodes advertise it on an Established session (their BGPSpeakers
	// say so), to Peers.
	Nodes []string `json:"nodes"`
	Peers []string `json:"peers"`
}

// BGPSession is one node's session to one peer, as the node's agent last
// wrote it in its BGPSpeaker.
type BGPSession struct {
	Node    string `json:"node"`
	Peer    string `json:"peer"`
	Address string `json:"address,omitempty"`
	State   string `json:"state"`
	// Reason is set when the session is not Established.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	BFD     string `json:"bfd,omitempty"`
	// Since is when State last changed.
	Since            time.Time `json:"since"`
	PrefixesSent     int64     `json:"prefixesSent"`
	PrefixesReceived int64     `json:"prefixesReceived"`
}

// bgpSessions lists every node's sessions, by node and peer.
func bgpSessions(adv bgpagent.Advertised) []BGPSession {
	var out []BGPSession
	for _, s := range adv.Speakers {
		for _, p := range s.Status.Peers {
			out = append(out, BGPSession{Node: s.Name, Peer: p.Name, Address: p.PeerAddress, State: string(p.State),
				Reason: p.Reason, Message: p.Message, BFD: string(p.BFDState), Since: p.LastTransitionTime.Time,
				PrefixesSent: p.PrefixesSent, PrefixesReceived: p.PrefixesReceived})
		}
	}
	slices.SortFunc(out, func(a, b BGPSession) int {
		return strings.Compare(a.Node+"\x00"+a.Peer, b.Node+"\x00"+b.Peer)
	})
	return out
}

// advertised is, for addrs in their order, who advertises each now, and a
// NotAdvertised problem for each one the decision advertises over no
// Established session.
func advertised(adv bgpagent.Advertised, addrs []string, now time.Time) ([]Advertisement, []Problem) {
	var out []Advertisement
	var probs []Problem
	for _, s := range addrs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		cs := adv.Routes[a.Unmap()]
		if len(cs) == 0 {
			continue
		}
		var ad Advertisement
		var down []string
		for _, c := range cs {
			if !c.Established {
				state := string(c.State)
				if state == "" {
					state = "no BGPSpeaker status"
				}
				if c.Reason != "" {
					state += ", " + c.Reason
				}
				down = append(down, fmt.Sprintf("%s to %s: %s", c.Node, c.Peer, state))
				continue
			}
			if !slices.Contains(ad.Nodes, c.Node) {
				ad.Nodes = append(ad.Nodes, c.Node)
			}
			if !slices.Contains(ad.Peers, c.Peer) {
				ad.Peers = append(ad.Peers, c.Peer)
			}
		}
		if len(ad.Nodes) > 0 {
			ad.Address = a.Unmap().String()
			slices.Sort(ad.Peers)
			out = append(out, ad)
			continue
		}
		probs = append(probs, Problem{Reason: ReasonNotAdvertised, Count: 1, LastSeen: now, Current: true,
			Message: withAddr(a.Unmap(), "BGP advertises it from "+strings.Join(down, "; ")+", but none of these sessions is Established (mooring status -o wide shows why)")})
	}
	return out, probs
}

// bgpServes reports whether some node's BGP decision advertises addr: an
// address nobody announces over L2 is then no problem of L2's.
func bgpServes(adv bgpagent.Advertised, addr netip.Addr) bool {
	return len(adv.Routes[addr.Unmap()]) > 0
}

// advertisedBy is the ADVERTISED BY cell: in the default table, per
// address of ADDRESSES, the nodes advertising it ("node-1+node-2", "-"
// for none), once when all addresses have the same; in the wide one
// "addr=nodes>peers" per advertised address.
func advertisedBy(r Row, wide bool) string {
	by := map[string]Advertisement{}
	for _, a := range r.AdvertisedBy {
		by[a.Address] = a
	}
	var parts []string
	if wide {
		for _, a := range r.AdvertisedBy {
			parts = append(parts, a.Address+"="+strings.Join(a.Nodes, "+")+">"+strings.Join(a.Peers, "+"))
		}
		return orDash(strings.Join(parts, ","))
	}
	return perAddress(r.Addresses, func(addr string) string {
		if a, ok := by[addr]; ok {
			return strings.Join(a.Nodes, "+")
		}
		return "-"
	})
}

// printBGP writes the BGP SESSIONS table; the wide one adds MESSAGE.
func printBGP(w io.Writer, ss []BGPSession, now time.Time, wide bool) error {
	if _, err := fmt.Fprintln(w, "\nBGP SESSIONS"); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "NODE\tPEER\tADDRESS\tSTATE\tSINCE\tBFD\tSENT\tRECEIVED\tREASON"
	if wide {
		head += "\tMESSAGE"
	}
	fmt.Fprintln(tw, head)
	for _, s := range ss {
		since := "-"
		if !s.Since.IsZero() {
			since = duration.HumanDuration(now.Sub(s.Since))
		}
		cells := []string{s.Node, s.Peer, orDash(s.Address), s.State, since, orDash(s.BFD),
			fmt.Sprint(s.PrefixesSent), fmt.Sprint(s.PrefixesReceived), orDash(s.Reason)}
		if wide {
			cells = append(cells, orDash(s.Message))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}
