package membership

import (
	"encoding/json"
	"slices"

	"github.com/hashicorp/memberlist"
)

// A returning agent that takes its addresses tells its peers at once
// ("took"): a peer that kept answering for them until then (make before
// break: internal/agent/table.go) lets them go within one datagram's
// latency instead of the next gossip round that carries the returning
// agent's metadata with Taking cleared. The datagram is a memberlist user
// message, encrypted and authenticated with the gossip key like all gossip.
// A lost one costs only time: the metadata follows.

// msgTook marks a took message (the first byte of a user message).
const msgTook byte = 't'

type tookMsg struct {
	Node  string `json:"n"`
	Since int64  `json:"t"` // the returning agent's NodeMeta.Since
}

// userSender is the part of memberlist Took uses.
type userSender interface {
	SendToAddress(a memberlist.Address, msg []byte) error
}

// senderBox holds the userSender (atomic.Pointer needs a concrete type).
type senderBox struct{ userSender }

// Took tells every live peer, best effort, that this agent took its
// addresses; since is the Since its metadata publishes, so a peer applies
// it only to that readiness (never to a later restart's). It never blocks
// on the network beyond one UDP send per peer. Before Run, nothing is sent.
func (m *Membership) Took(since int64) {
	s := m.sender.Load()
	if s == nil {
		return
	}
	b, err := json.Marshal(tookMsg{Node: m.cfg.NodeName, Since: since})
	if err != nil {
		return
	}
	sent := m.sendToPeers(s, append([]byte{msgTook}, b...), "telling a peer this node took its addresses; the metadata follows")
	m.met.tookSent.Add(float64(sent))
}

// sendToPeers sends msg to every live member but this one and except,
// best effort: one UDP send each, a failed one logged at debug with why.
// It reports how many sends succeeded.
func (m *Membership) sendToPeers(s userSender, msg []byte, why string, except ...string) int {
	m.mu.Lock()
	to := make([]memberlist.Address, 0, len(m.live))
	for name, addr := range m.live {
		if name != m.cfg.NodeName && !slices.Contains(except, name) {
			to = append(to, memberlist.Address{Addr: addr, Name: name})
		}
	}
	m.mu.Unlock()
	sent := 0
	for _, a := range to {
		if err := s.SendToAddress(a, msg); err != nil {
			m.log.Debug(why, "peer", a.Name, "err", err)
			continue
		}
		sent++
	}
	return sent
}

// receiveTook records a peer's took message: until its metadata carries
// the same (Taking cleared), Snapshot shows that member as no longer
// taking. A message from an unknown member, or one naming another
// readiness than the member publishes, is ignored.
func (m *Membership) receiveTook(b []byte) {
	var t tookMsg
	if err := json.Unmarshal(b, &t); err != nil || t.Node == "" || t.Node == m.cfg.NodeName {
		return
	}
	m.mu.Lock()
	meta, err := DecodeNodeMeta(m.metas[t.Node])
	_, live := m.live[t.Node]
	apply := live && err == nil && meta.Taking && meta.Since == t.Since
	if apply {
		m.took[t.Node] = t.Since
	}
	m.mu.Unlock()
	if apply {
		m.met.tookReceived.Inc()
		m.log.Debug("a returning peer took its addresses", "node", t.Node)
		m.notify()
	}
}

// tookOverride clears mb's Taking when its agent said it took them for
// the readiness it still publishes (under m.mu).
func (m *Membership) tookOverride(mb *Member) {
	if since, ok := m.took[mb.Name]; ok && mb.MetaErr == nil && mb.Meta.Taking && mb.Meta.Since == since {
		mb.Meta.Taking = false
	}
}

// forgetTook drops the record of name's took message once its metadata no
// longer says Taking for that readiness (under m.mu).
func (m *Membership) forgetTook(name string, meta NodeMeta, err error) {
	if since, ok := m.took[name]; ok && (err != nil || !meta.Taking || meta.Since != since) {
		delete(m.took, name)
	}
}
