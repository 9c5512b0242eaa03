package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// eventReasonNodeAppeared: the agent ran before its Node existed.
const eventReasonNodeAppeared = "AgentNodeAppeared"

// Ready reports whether the agent can announce: its --node-name names a
// Node it has seen. /readyz serves it.
func (a *Agent) Ready() error {
	if !a.nodeFound.Load() {
		return fmt.Errorf("no Node named %q: check --node-name (the DaemonSet sets it from spec.nodeName)", a.cfg.NodeName)
	}
	return nil
}

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
	switch {
	case self == nil && a.nodeFound.Load(), self == nil && a.missingSince.IsZero():
		a.missingSince = a.deps.Clock.Now()
		a.nodeFound.Store(false)
		a.log.Error("no Node with this agent's name: it announces nothing until one appears; check --node-name (the DaemonSet sets it from spec.nodeName)",
			"node", a.cfg.NodeName, "nodes", len(nodes))
	case self != nil && !a.nodeFound.Load():
		a.nodeFound.Store(true)
		if a.missingSince.IsZero() {
			return
		}
		missing := a.deps.Clock.Since(a.missingSince).Round(time.Second)
		a.missingSince = time.Time{}
		a.log.Info("this agent's Node appeared", "node", a.cfg.NodeName, "after", missing)
		a.rec.recordOn(ctx, &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: self.Name, UID: self.UID},
			event{corev1.EventTypeWarning, eventReasonNodeAppeared, fmt.Sprintf(
				"the Mooring agent ran %s with --node-name %s before this Node existed and announced nothing meanwhile", missing, self.Name)},
			metav1.NamespaceDefault)
	}
}
