// Package health is what the agent says about itself over HTTP: /metrics,
// /healthz and /readyz (the DaemonSet's readiness probe, so a rolling
// update moves on only once this node serves again). State holds the
// flags the agent's rooms set (decided, Node found, gossip peers, snapshot
// or live source, holding down); Probe turns them into the readiness
// verdict with every reason it is not ready.
//
// It may import prometheus and internal/serve; nothing of the agent's
// other rooms (they set State's flags).
package health
