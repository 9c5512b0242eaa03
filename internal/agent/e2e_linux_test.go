//go:build linux

package agent_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/netlab"
)

var three = []string{"node-1", "node-2", "node-3"}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func owner(a netip.Addr, eligible ...string) string { return announce.Rank(eligible, a)[0] }

func sel(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

// Exactly one node answers for each address, IPv4 and IPv6, over several
// Services; policies select nodes, interfaces and Services; with
// externalTrafficPolicy: Local only a node with a ready endpoint answers;
// an invalid policy gets a condition and the others keep working.
func TestE2EAnnouncementSelection(t *testing.T) {
	c := newCluster(t, 3, map[string]map[string]string{
		"node-1": {"role": "control-plane"}, "node-2": {"role": "worker"}, "node-3": {"role": "worker"},
	})
	c.policy("all", mooringv1.L2AnnouncementPolicySpec{ServiceSelector: sel("l2", "all")})
	c.policy("workers", mooringv1.L2AnnouncementPolicySpec{ServiceSelector: sel("l2", "workers"), NodeSelector: sel("role", "worker"), Interfaces: []string{"eth0"}})
	// "eth" must not match "eth0": expressions are anchored at both ends.
	c.policy("wrong-interface", mooringv1.L2AnnouncementPolicySpec{ServiceSelector: sel("l2", "wrong-interface"), Interfaces: []string{"eth"}})
	c.policy("broken", mooringv1.L2AnnouncementPolicySpec{ServiceSelector: sel("l2", "broken"), Interfaces: []string{"eth[0-"}})

	spread := map[string][]string{ // Service -> addresses, both families
		"web-a": {"10.213.0.100", "fd00:213::64"}, "web-b": {"10.213.0.101", "fd00:213::65"},
		"web-c": {"10.213.0.102", "fd00:213::66"}, "web-d": {"10.213.0.103", "fd00:213::67"},
	}
	for name, ips := range spread {
		c.service(name, map[string]string{"l2": "all"}, false, ips...)
	}
	c.service("workers-only", map[string]string{"l2": "workers"}, false, "10.213.0.110", "fd00:213::6e")
	c.service("local", map[string]string{"l2": "all"}, true, "10.213.0.111", "fd00:213::6f")
	c.endpoints("local", map[string]bool{"node-1": true, "node-3": false})
	c.service("unselected", nil, false, "10.213.0.112")
	c.service("wrong-interface", map[string]string{"l2": "wrong-interface"}, false, "10.213.0.113")
	c.service("broken", map[string]string{"l2": "broken"}, false, "10.213.0.114")
	c.startAgents()

	for _, ips := range spread {
		for _, s := range ips {
			c.waitResponders(addr(s), []string{owner(addr(s), three...)}, 20*time.Second)
		}
	}
	for _, s := range []string{"10.213.0.110", "fd00:213::6e"} {
		c.waitResponders(addr(s), []string{owner(addr(s), "node-2", "node-3")}, 10*time.Second)
	}
	for _, s := range []string{"10.213.0.111", "fd00:213::6f"} {
		c.waitResponders(addr(s), []string{"node-1"}, 10*time.Second)
	}
	for _, s := range []string{"10.213.0.112", "10.213.0.113", "10.213.0.114"} {
		c.waitResponders(addr(s), nil, 5*time.Second)
	}

	// The endpoint moves: so does the address, live.
	c.endpoints("local", map[string]bool{"node-1": false, "node-3": true})
	for _, s := range []string{"10.213.0.111", "fd00:213::6f"} {
		c.waitResponders(addr(s), []string{"node-3"}, 10*time.Second)
	}

	// Visible state: every node's own L2Announcer (its gossip view and
	// interfaces); the status writer reports that no node may announce
	// the wrong-interface address; an Event per move and none for a first announcement; no
	// Service written by an agent.
	waitFor(t, 10*time.Second, "L2Announcers", func() (bool, string) {
		var anns mooringv1.L2AnnouncerList
		if err := c.env.Client.List(c.ctx, &anns); err != nil {
			return false, err.Error()
		}
		desc, problem := fmt.Sprintf("%+v", anns.Items), false
		if len(anns.Items) != 3 {
			return false, desc
		}
		for _, an := range anns.Items {
			// eth0 with its network, read from netlink (the pool
			// condition AddressesOutsideNodeSubnets checks against it).
			if !slices.Equal(an.Status.Members, three) || !slices.ContainsFunc(an.Status.Interfaces, func(i mooringv1.AnnouncerInterface) bool {
				return i.Name == "eth0" && slices.Contains(i.Prefixes, "10.213.0.0/24")
			}) {
				return false, desc
			}
			for _, p := range an.Status.Problems {
				// No node has an interface "eth" matches, so none is a
				// candidate (eligibility): the status writer reports it.
				problem = problem || (p.Address == "10.213.0.113" && p.Reason == mooringv1.ProblemNoEligibleNode && an.Status.StatusWriter)
			}
		}
		return problem, desc
	})
	c.waitEvent("local", mooringv1.EventReasonAnnounced, 10*time.Second)
	if evs := c.events("web-a"); len(evs) != 0 {
		t.Fatalf("events for a first announcement: %+v", evs)
	}
	svcs, err := c.env.Clientset.CoreV1().Services("default").List(c.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		for _, mf := range s.ManagedFields {
			if strings.Contains(mf.Manager, "mooring") {
				t.Fatalf("Service %s written by %s", s.Name, mf.Manager)
			}
		}
	}

	// The broken policy is reported; the others are Ready.
	waitFor(t, 10*time.Second, "policy conditions", func() (bool, string) {
		var pols mooringv1.L2AnnouncementPolicyList
		if err := c.env.Client.List(c.ctx, &pols); err != nil {
			return false, err.Error()
		}
		ok, desc := true, ""
		for _, p := range pols.Items {
			invalid := meta.IsStatusConditionTrue(p.Status.Conditions, mooringv1.ConditionInvalidSpec)
			ready := meta.IsStatusConditionTrue(p.Status.Conditions, mooringv1.ConditionReady)
			desc += p.Name + ":" + condString(p.Status.Conditions) + " "
			if invalid != (p.Name == "broken") || ready == (p.Name == "broken") {
				ok = false
			}
		}
		return ok, desc
	})
}

func condString(cs []metav1.Condition) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.Type+"="+string(c.Status)+"("+c.Message+")")
	}
	return strings.Join(s, ",")
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v; last: %s", what, within, last)
}

// failoverVIPs picks an IPv4 and an IPv6 address with the same ranking over
// the nodes, so that one node loss moves both.
func failoverVIPs(nodes []string) (v4, v6 netip.Addr, rank []string) {
	v4 = addr("10.213.0.120")
	rank = announce.Rank(nodes, v4)
	v6 = addr("fd00:213::78")
	for i := 0; i < 80 && !slices.Equal(announce.Rank(nodes, v6), rank); i++ {
		v6 = v6.Next()
	}
	return v4, v6, rank
}

// Hard node loss (agent SIGKILLed, cable pulled): the next node in the
// ranking takes over, measured by a client connecting every 20 ms. Then,
// with the API server stopped, the same again.
func TestE2EFailover(t *testing.T) {
	f := newFailoverCluster(t, 20*time.Millisecond)
	c, v4, v6, rank, clients := f.cluster, f.v4, f.v6, f.rank, f.clients
	for _, tl := range clients {
		tl.waitServedBy(t, rank[0], 10*time.Second)
	}

	step := func(victim, next string, what string) {
		kill := c.killNode(c.lab.Host(victim))
		for i, tl := range clients {
			out, node, ok := tl.outageAfter(kill, 10*time.Second)
			if !ok {
				t.Fatalf("%s: family %d: no takeover within 10 s of killing %s", what, i, victim)
			}
			t.Logf("%s: %s killed; %s answered after %v (%s)", what, victim, node, out.Round(time.Millisecond), []string{"IPv4", "IPv6"}[i])
			tl.waitServedBy(t, next, 5*time.Second)
		}
		c.waitResponders(v4, []string{next}, 5*time.Second)
		c.waitResponders(v6, []string{next}, 5*time.Second)
	}
	step(rank[0], rank[1], "with the API server")

	// Everything the decision needs is in the caches and gossip: stopping
	// the API server must not matter. (It cannot be restarted: last step.)
	c.stopAPIServer()
	step(rank[1], rank[2], "API server stopped")
}

// newFailoverCluster is the set-up every failover measurement shares: three
// nodes, one policy for all, a dual-stack Service served on every node, the
// agents running, the first-ranked node answering, and one client per family
// connecting every tick.
type failoverCluster struct {
	*cluster
	v4, v6  netip.Addr
	rank    []string // the Service's nodes in ownership order
	clients []*timeline
}

func newFailoverCluster(t *testing.T, tick time.Duration) failoverCluster {
	t.Helper()
	c := newClusterWithSysctls(t, 3)
	c.policy("all", mooringv1.L2AnnouncementPolicySpec{})
	v4, v6, rank := failoverVIPs(three)
	c.service("vip", nil, false, v4.String(), v6.String())
	c.serveVIP(v4)
	c.serveVIP(v6)
	c.startAgents()
	c.waitResponders(v4, rank[:1], 20*time.Second)
	c.waitResponders(v6, rank[:1], 10*time.Second)
	return failoverCluster{cluster: c, v4: v4, v6: v6, rank: rank,
		clients: []*timeline{c.startClient(v4, tick), c.startClient(v6, tick)}}
}

// newClusterWithSysctls sets arp_ignore=1/arp_announce=2 on the nodes, as a
// node holding VIPs on lo must, and keeps IPv6 addresses across a link
// bounce (the kernel default drops them, and a node brought back by the
// benchmark would be unreachable over IPv6).
func newClusterWithSysctls(t *testing.T, nodes int) *cluster {
	t.Helper()
	return newClusterOpts(t, netlab.Config{Nodes: nodes, NodeSysctls: map[string]string{
		"net.ipv4.conf.all.arp_ignore": "1", "net.ipv4.conf.all.arp_announce": "2",
		"net.ipv6.conf.all.keep_addr_on_down": "1"}}, nil)
}

// A node with a stale local copy of an announced address (on lo, with the
// kernel default arp_ignore=0 — the kube-ipvs0 trap) answers ARP by itself:
// two responders. Its agent reports it (Event + metric), and the owner's
// split-brain probe reports the second MAC.
func TestE2EStaleLocalAddressAndSplitBrain(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.policy("all", mooringv1.L2AnnouncementPolicySpec{})
	vip := addr("10.213.0.130")
	rank := announce.Rank(three, vip)
	c.service("stale", nil, false, vip.String())
	c.startAgents()
	c.waitResponders(vip, rank[:1], 20*time.Second)

	culprit := c.lab.Host(rank[1])
	if err := culprit.AddAddr("lo", netip.PrefixFrom(vip, 32)); err != nil {
		t.Fatal(err)
	}
	want := []string{rank[0], rank[1]}
	slices.Sort(want)
	c.waitResponders(vip, want, 5*time.Second)

	ev := c.waitEvent("stale", mooringv1.EventReasonStaleLocalAddress, 15*time.Second)
	if ev.Source.Host != culprit.Name || ev.Type != corev1.EventTypeWarning {
		t.Fatalf("stale event from %q (%s): %s", ev.Source.Host, ev.Type, ev.Message)
	}
	t.Logf("stale: %s", ev.Message)
	waitFor(t, 10*time.Second, "mooring_stale_local_addresses on "+culprit.Name, func() (bool, string) {
		v, err := c.scrape(culprit, "mooring_stale_local_addresses")
		return err == nil && v == 1, err2s(err, v)
	})
	sb := c.waitEvent("stale", mooringv1.EventReasonSplitBrain, 15*time.Second)
	if sb.Source.Host != rank[0] || !strings.Contains(sb.Message, culprit.MAC.String()) {
		t.Fatalf("split-brain event from %q: %s", sb.Source.Host, sb.Message)
	}
	t.Logf("split brain: %s", sb.Message)
	owner := c.lab.Host(rank[0])
	waitFor(t, 10*time.Second, "mooring_split_brain_addresses on "+owner.Name, func() (bool, string) {
		v, err := c.scrape(owner, "mooring_split_brain_addresses")
		return err == nil && v == 1, err2s(err, v)
	})

	// A client that learned the culprit's MAC during the split (planted
	// after the owner's split-start announcements are over, so only the
	// announcements at the split's end can correct it).
	time.Sleep(4 * time.Second)
	client := c.lab.Client()
	nl, err := client.NetlinkHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	if err := nl.NeighSet(&netlink.Neigh{LinkIndex: client.IfIndex, IP: vip.AsSlice(), HardwareAddr: culprit.MAC,
		State: netlink.NUD_STALE}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past the kernel's locktime (1 s)

	// The fix the event suggests clears the report, and the owner, seeing
	// the split end, re-announces: the client is pointed back at it. (No
	// probe from the client before this check: the owner's unicast reply
	// would correct the entry by itself.)
	if err := culprit.Sysctl("net.ipv4.conf.all.arp_ignore", "1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "client's neighbour entry back on the owner's MAC", func() (bool, string) {
		mac, state, err := client.Neighbor(vip)
		return err == nil && bytes.Equal(mac, owner.MAC), fmt.Sprintf("%v %s %v", mac, state, err)
	})
	c.waitResponders(vip, rank[:1], 5*time.Second)
	waitFor(t, 10*time.Second, "stale report cleared", func() (bool, string) {
		v, err := c.scrape(culprit, "mooring_stale_local_addresses")
		return err == nil && v == 0, err2s(err, v)
	})
}

func err2s(err error, v float64) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprint(v)
}
