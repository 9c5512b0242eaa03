package membership

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/hashicorp/memberlist"
)

// NodeMeta is what an agent publishes about itself in its gossip metadata:
// whether it can serve and on which interfaces, so that every agent ranks
// the same eligible candidates (internal/announce consumes it as a
// Capability). It must encode to at most memberlist.MetaMaxSize (512)
// bytes.
type NodeMeta struct {
	// Ranking is the ranking hash version the agent computes owners with.
	Ranking string `json:"r,omitempty"`
	// Ready says the agent serves: caches synced, gossip settled, responder
	// running. A member that is not ready is not a candidate.
	Ready bool `json:"ok,omitempty"`
	// Since is when the agent became ready (Unix seconds): a restarting
	// agent that finds peers ready since before it started holds back
	// (agent: --hold-down) instead of pulling its addresses back at once.
	Since int64 `json:"t,omitempty"`
	// ReadyAt is Since in Unix milliseconds, and Born when the agent
	// started (Unix milliseconds, from its first metadata on): with them
	// every agent tells a peer's cold start from a restart into a cluster
	// that served without it the same way (internal/agent/handoff
	// ServedBefore). Older agents publish neither.
	ReadyAt int64 `json:"tr,omitempty"`
	Born    int64 `json:"b,omitempty"`
	// Interfaces are its usable interfaces; Defaults those a policy naming
	// no interfaces uses.
	Interfaces []string `json:"if,omitempty"`
	Defaults   []string `json:"df,omitempty"`
	// Reason says why the agent is not ready, or serves no interface.
	Reason string `json:"why,omitempty"`
	// Leaving is set just before a graceful leave.
	Leaving bool `json:"bye,omitempty"`
	// Taking is set by a returning agent from publishing its readiness
	// until it takes its addresses: it waits for every ready peer to list
	// it in Counted.
	Taking bool `json:"tk,omitempty"`
	// Confirms says the agent publishes Counted; an older agent does not,
	// and a returning node waits its bounded maximum for it instead.
	Confirms bool `json:"cf,omitempty"`
	// Counted names the Taking members that the decision this agent's
	// responder has applied counts as candidates: it has let their
	// addresses go. Usually empty or one name, at most MaxCounted.
	Counted []string `json:"cn,omitempty"`
	// HW are the MACs of its usable interfaces by name (12 hex digits): a
	// peer that hands an address over to this agent answers with the MAC
	// this agent will (make before break). Dropped when the metadata would
	// not fit gossip's limit.
	HW map[string]string `json:"hw,omitempty"`
}

// MaxCounted bounds NodeMeta.Counted, so that the metadata stays within
// gossip's limit; a returning node left out waits its bounded maximum.
const MaxCounted = 8

// FitCounted returns m within gossip's limit, giving up what matters least
// first: long names in Counted are replaced by their short keys (CountKey:
// a node name can be 253 bytes, so eight long ones did not fit beside HW);
// then HW goes (peers hand addresses over answering with their own MACs);
// then Counted is shortened (a name left out is not confirmed, and its node
// waits its bounded maximum).
func (m NodeMeta) FitCounted() NodeMeta {
	m.Counted = m.Counted[:min(len(m.Counted), MaxCounted):min(len(m.Counted), MaxCounted)]
	if _, err := m.Encode(); err == nil {
		return m
	}
	keyed := make([]string, len(m.Counted))
	for i, name := range m.Counted {
		keyed[i] = name
		if len(name) > len(countKeyPrefix)+countKeyLen {
			keyed[i] = CountKey(name)
		}
	}
	m.Counted = keyed
	if _, err := m.Encode(); err != nil {
		m.HW = nil
	}
	for len(m.Counted) > 0 {
		if _, err := m.Encode(); err == nil {
			break
		}
		m.Counted = m.Counted[:len(m.Counted)-1]
	}
	return m
}

// countKeyPrefix marks a short key in Counted; no node name contains '#'
// (a Kubernetes name is a DNS subdomain).
const (
	countKeyPrefix = "#"
	countKeyLen    = 16
)

// CountKey is the short form FitCounted publishes in Counted for a long
// node name: '#' and the first 8 bytes of its SHA-256 in hex. Counts
// accepts a name in either form.
func CountKey(name string) string {
	sum := sha256.Sum256([]byte(name))
	return countKeyPrefix + hex.EncodeToString(sum[:countKeyLen/2])
}

// MAC returns the MAC m publishes for its interface ifname, nil if none.
func (m NodeMeta) MAC(ifname string) net.HardwareAddr {
	b, err := hex.DecodeString(m.HW[ifname])
	if err != nil || len(b) != 6 {
		return nil
	}
	return net.HardwareAddr(b)
}

// Counts reports whether m confirms that its agent counts name (see
// Counted).
func (m NodeMeta) Counts(name string) bool {
	return slices.Contains(m.Counted, name) || slices.Contains(m.Counted, CountKey(name))
}

// metaVersion prefixes the encoding, so that a future format is told apart
// from this one and from the plain strings of older agents.
const metaVersion = 'm'

// ErrNoMeta is returned by DecodeNodeMeta for metadata of an agent older
// than NodeMeta (empty, or the bare word "leaving").
var ErrNoMeta = errors.New("membership: member publishes no node metadata (an older agent)")

// Encode returns the wire form, or an error if it exceeds memberlist's
// limit (too many interface names).
func (m NodeMeta) Encode() ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("membership: encoding node metadata: %w", err)
	}
	b = append([]byte{metaVersion}, b...)
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("membership: node metadata is %d bytes, more than gossip's %d: too many interfaces", len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

// DecodeNodeMeta reads what Encode wrote. It never panics on what a peer
// sends.
func DecodeNodeMeta(b []byte) (NodeMeta, error) {
	if len(b) == 0 || string(b) == metaLeaving {
		return NodeMeta{Leaving: len(b) > 0}, ErrNoMeta
	}
	if b[0] != metaVersion {
		return NodeMeta{}, fmt.Errorf("membership: unknown node metadata format %q", b[0])
	}
	var m NodeMeta
	if err := json.Unmarshal(b[1:], &m); err != nil {
		return NodeMeta{}, fmt.Errorf("membership: decoding node metadata: %w", err)
	}
	return m, nil
}

// Member is one live member as gossip knows it.
type Member struct {
	Name string
	// Addr is the address it gossips from: its node's address when the
	// agent binds the node's own (status.hostIP).
	Addr netip.AddrPort
	// Meta is what it publishes; MetaErr is set when that could not be
	// read (ErrNoMeta for an older agent).
	Meta    NodeMeta
	MetaErr error
}

// Snapshot returns the live members (this one included) with their
// metadata, sorted by name.
func (m *Membership) Snapshot() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(m.live))
	for name, addr := range m.live {
		ap, _ := netip.ParseAddrPort(addr)
		mb := Member{Name: name, Addr: ap}
		mb.Meta, mb.MetaErr = DecodeNodeMeta(m.metas[name])
		m.tookOverride(&mb)
		out = append(out, mb)
	}
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// SetMeta publishes meta as this member's metadata; peers see it within a
// few gossip rounds (Changes fires on them). Before Run it is what Run
// starts with.
func (m *Membership) SetMeta(meta NodeMeta) error {
	b, err := meta.Encode()
	if err != nil {
		return err
	}
	if prev := m.meta.Load().([]byte); string(prev) == string(b) {
		return nil
	}
	m.meta.Store(b)
	m.mu.Lock()
	m.metaSeq++
	m.mu.Unlock()
	m.kickMeta()
	return nil
}
