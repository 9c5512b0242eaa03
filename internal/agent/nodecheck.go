package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooringlb/mooring/internal/agent/health"
	"github.com/mooringlb/mooring/internal/agent/status"
)

// eventReasonNodeAppeared: the agent ran before its Node existed.
const eventReasonNodeAppeared = "AgentNodeAppeared"

// nodeSeen tracks whether this agent's Node exists: an agent whose
// --node-name matches no Node is never eligible and would otherwise run
// silently. It logs when the Node is missing, and records one Event on the
// Node when it appears after being missing.
func (a *Agent) nodeSeen(ctx context.Context, nodes []corev1.Node) {
	var self *corev1.Node
	for i := range nodes {
		if nodes[i].Name == a.cfg.NodeName {
			self = &nodes[i]
		}
	}
	found := a.ready.NodeFound.Load()
	switch {
	case self == nil && found, self == nil && a.loop.missingSince.IsZero():
		a.loop.missingSince = a.deps.Clock.Now()
		a.ready.NodeFound.Store(false)
		a.log.Error("no Node with this agent's name: it announces nothing until one appears; check --node-name (the DaemonSet sets it from spec.nodeName)",
			"node", a.cfg.NodeName, "nodes", len(nodes))
	case self != nil && !found:
		a.ready.NodeFound.Store(true)
		if a.loop.missingSince.IsZero() {
			return
		}
		missing := a.deps.Clock.Since(a.loop.missingSince).Round(time.Second)
		a.loop.missingSince = time.Time{}
		a.log.Info("this agent's Node appeared", "node", a.cfg.NodeName, "after", missing)
		a.rec.RecordOn(ctx, &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: self.Name, UID: self.UID},
			status.Event{Type: corev1.EventTypeWarning, Reason: eventReasonNodeAppeared, Message: fmt.Sprintf(
				"the Mooring agent ran %s with --node-name %s before this Node existed and announced nothing meanwhile", missing, self.Name)},
			metav1.NamespaceDefault)
	}
}

// probe is the readiness probe over this agent.
func (a *Agent) probe() health.Probe {
	p := health.Probe{State: a.ready, Node: a.cfg.NodeName, GossipPort: a.cfg.GossipPort, HoldDown: a.cfg.HoldDown,
		Members: a.deps.Members.Members, InsecureGossip: a.cfg.InsecureGossip}
	if d, ok := a.deps.Members.(interface{ Deferring() bool }); ok {
		p.Deferring = d.Deferring
	}
	if h, ok := a.deps.Responder.(interface{ Healthy() error }); ok {
		p.Responder = h.Healthy
	}
	return p
}

// Ready reports whether the agent can announce: its --node-name names a
// Node it has seen.
func (a *Agent) Ready() error { return a.probe().Ready() }

// Serving returns nil when the agent serves, else every reason it does not
// (health.Probe.Serving).
func (a *Agent) Serving() error { return a.probe().Serving() }

// readyz is /readyz.
func (a *Agent) readyz() (string, error) { return a.probe().Readyz() }
