package status

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"
)

// Output formats of -o.
const (
	OutputTable = "table"
	OutputWide  = "wide"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// messageWidth is where the default table cuts MESSAGE; -o wide prints it whole.
const messageWidth = 60

// List is the document -o json and -o yaml print.
type List struct {
	Services []Row `json:"services"`
	// Notes say which other implementations run and how Mooring's
	// controller runs, when that matters (a migration).
	Notes []string `json:"notes,omitempty"`
	// PodIPAM is set when a pod IPAM mode is recorded in the cluster.
	PodIPAM *PodIPAM `json:"podIPAM,omitempty"`
	// BGP is set when the cluster has BGP objects.
	BGP *BGP `json:"bgp,omitempty"`
}

// BGP is the BGP section: every node's sessions.
type BGP struct {
	Sessions []BGPSession `json:"sessions"`
}

func nonNilSessions(ss []BGPSession) []BGPSession {
	if ss == nil {
		return []BGPSession{}
	}
	return ss
}

// Print writes rows in format; now dates the problems' ages.
func Print(w io.Writer, format string, rows []Row, now time.Time) error {
	return PrintAll(w, format, rows, nil, now)
}

// PrintAll writes rows and, when pi is set, pod IPAM in format.
func PrintAll(w io.Writer, format string, rows []Row, pi *PodIPAM, now time.Time) error {
	return printDoc(w, format, List{Services: nonNil(rows), PodIPAM: pi}, now)
}

// printDoc writes l in format: the table, then its notes, then pod IPAM.
func printDoc(w io.Writer, format string, l List, now time.Time) error {
	switch format {
	case OutputJSON:
		b, err := json.MarshalIndent(l, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case OutputYAML:
		b, err := yaml.Marshal(l)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case OutputTable, "", OutputWide:
		wide := format == OutputWide
		if err := printTable(w, l.Services, now, wide, l.BGP != nil); err != nil {
			return err
		}
		for _, n := range l.Notes {
			if _, err := fmt.Fprintln(w, n); err != nil {
				return err
			}
		}
		if l.BGP != nil {
			if err := printBGP(w, l.BGP.Sessions, now, wide); err != nil {
				return err
			}
		}
		if l.PodIPAM == nil {
			return nil
		}
		return printPodIPAM(w, l.PodIPAM, wide)
	}
	return fmt.Errorf("-o %q: use table, wide, json or yaml", format)
}

func nonNil(rows []Row) []Row {
	if rows == nil {
		return []Row{}
	}
	return rows
}

// printTable writes the Services; bgp adds ADVERTISED BY.
func printTable(w io.Writer, rows []Row, now time.Time, wide, bgp bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := []string{"NAMESPACE", "NAME"}
	if wide {
		head = append(head, "CLASS")
	}
	head = append(head, "ADDRESSES", "ASSIGNED", "ANNOUNCED BY")
	if bgp {
		head = append(head, "ADVERTISED BY")
	}
	fmt.Fprintln(tw, strings.Join(append(head, "PROBLEMS", "MESSAGE"), "\t"))
	for _, r := range rows {
		cells := []string{r.Namespace, r.Name}
		if wide {
			cells = append(cells, orDash(r.Class))
		}
		cells = append(cells, addresses(r), assigned(r), announcedBy(r, wide))
		if bgp {
			cells = append(cells, advertisedBy(r, wide))
		}
		cells = append(cells, problems(r, now, wide), message(r, wide))
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func addresses(r Row) string {
	switch {
	case len(r.Addresses) > 0:
		return strings.Join(r.Addresses, ",")
	case r.OtherClass:
		return "<other class>"
	}
	return "<pending>"
}

func assigned(r Row) string {
	if r.Assigned == nil {
		return "-"
	}
	return r.Assigned.Status + "/" + r.Assigned.Reason
}

// announcedBy is, in the default table, who announces each address of
// ADDRESSES, in its order ("-" for one nobody announces), or once when
// every address has the same announcers; in the wide one "addr=who" per
// announcer. Mooring's announcer is "node/if"; another implementation's
// carries its name: "node-2/eth0 (MetalLB)", or "node-2/eth0 (Mooring,
// MetalLB)" when both answer from the same node.
func announcedBy(r Row, wide bool) string {
	var parts []string
	if wide {
		for _, a := range r.AnnouncedBy {
			who := a.By
			if a.Implementation != "" {
				who += " (" + a.Implementation + ")"
			}
			parts = append(parts, a.Address+"="+who)
		}
		return orDash(strings.Join(parts, ","))
	}
	by := map[string][]Announcement{}
	for _, a := range r.AnnouncedBy {
		by[a.Address] = append(by[a.Address], a)
	}
	return perAddress(r.Addresses, func(addr string) string { return describe(by[addr]) })
}

// perAddress is a default-table cell: cell(addr) for each address of
// addrs (canonical form), in their order, comma-separated, or once when
// every address has the same; "-" for none.
func perAddress(addrs []string, cell func(addr string) string) string {
	var parts []string
	same := true
	for _, addr := range addrs {
		parts = append(parts, cell(canonical(addr)))
		same = same && parts[len(parts)-1] == parts[0]
	}
	if same && len(parts) > 0 {
		parts = parts[:1]
	}
	return orDash(strings.Join(parts, ","))
}

// describe is one address's announcers: "-" for none, "node/if" when only
// Mooring's, else each node/if with the implementations answering from it.
func describe(as []Announcement) string {
	if len(as) == 0 {
		return "-"
	}
	if !slices.ContainsFunc(as, func(a Announcement) bool { return a.Implementation != "" }) {
		var out []string
		for _, a := range as {
			out = append(out, a.By)
		}
		return strings.Join(out, " & ")
	}
	// One entry per node: MetalLB's ServiceL2Status names no interface
	// when its speaker answers on all of them.
	var order []string
	impls, by := map[string][]string{}, map[string]string{}
	for _, a := range as {
		node := a.Node
		if node == "" {
			node = a.By
		}
		if _, ok := impls[node]; !ok {
			order = append(order, node)
		}
		if len(by[node]) < len(a.By) {
			by[node] = a.By
		}
		impl := a.Implementation
		if impl == "" {
			impl = "Mooring"
		}
		impls[node] = append(impls[node], impl)
	}
	var out []string
	for _, n := range order {
		out = append(out, by[n]+" ("+strings.Join(impls[n], ", ")+")")
	}
	return strings.Join(out, " & ")
}

func canonical(addr string) string {
	if a, err := netip.ParseAddr(addr); err == nil {
		return a.Unmap().String()
	}
	return addr
}

// problems is "Reason (age)" ("now" for a current problem) per reason in the default table and
// "Reason (age, node, xN)" per reason and node in the wide one.
func problems(r Row, now time.Time, wide bool) string {
	var parts []string
	seen := map[string]bool{}
	for _, p := range r.Problems { // newest first
		age := duration.HumanDuration(now.Sub(p.LastSeen)) + " ago"
		if p.Current {
			age = "now"
		}
		switch {
		case wide:
			s := p.Reason + " (" + age
			if p.Node != "" {
				s += ", " + p.Node
			}
			if p.Count > 1 {
				s += fmt.Sprintf(", x%d", p.Count)
			}
			parts = append(parts, s+")")
		case !seen[p.Reason]:
			seen[p.Reason] = true
			parts = append(parts, p.Reason+" ("+age+")")
		}
	}
	return orDash(strings.Join(parts, ", "))
}

// message joins the row's messages; the default table cuts it at
// messageWidth, and shows the first current problem's message (an address
// nobody announces) when no condition has one. The wide one adds each
// problem's message.
func message(r Row, wide bool) string {
	msgs := r.Messages
	if wide {
		msgs = append([]string(nil), msgs...)
		for _, p := range r.Problems {
			msgs = append(msgs, p.Reason+": "+p.Message)
		}
	} else if i := slices.IndexFunc(r.Problems, func(p Problem) bool { return p.Current }); len(msgs) == 0 && i >= 0 {
		msgs = []string{r.Problems[i].Message}
	}
	m := strings.Join(msgs, "; ")
	if !wide && len([]rune(m)) > messageWidth {
		m = string([]rune(m)[:messageWidth-3]) + "..."
	}
	return m
}
