package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// memberlistDefaultPort is where memberlist listens unless told
// otherwise: MetalLB's speakers and Mooring's agents both default to it.
const memberlistDefaultPort = 7946

// agentSelector finds Mooring's agent DaemonSets (the chart's and
// config/agent's labels).
const agentSelector = "app.kubernetes.io/name=mooring,app.kubernetes.io/component=agent"

// gossipPortFree fails when MetalLB's speakers and Mooring's agents, both
// on the nodes' own network, gossip on the same port: the second to start
// on a node cannot bind it, so Mooring's agents beside the speakers never
// form their cluster (docs/migration.md). It reads the DaemonSets' specs:
// with no agent DaemonSet (agents run some other way) there is nothing to
// compare and it passes.
func (r *Runner) gossipPortFree(ctx context.Context) error {
	var speakers []string
	for _, name := range r.Facts.Speakers {
		ds, err := r.CS.AppsV1().DaemonSets(r.Facts.MetalLBNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if port, ok := speakerMemberlistPort(&ds.Spec.Template.Spec); ok && ds.Spec.Template.Spec.HostNetwork {
			speakers = append(speakers, fmt.Sprintf("%d %s/%s", port, ds.Namespace, ds.Name))
		}
	}
	agents, err := r.CS.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
	if err != nil {
		return err
	}
	for _, a := range agents.Items {
		if !a.Spec.Template.Spec.HostNetwork {
			continue
		}
		port := agentGossipPort(&a.Spec.Template.Spec)
		for _, s := range speakers {
			sp, name, _ := strings.Cut(s, " ")
			if sp != strconv.Itoa(port) {
				continue
			}
			free := port + 1
			return finalError{fmt.Errorf("MetalLB's speakers (DaemonSet %s) hold port %d for memberlist on the nodes' network, and Mooring's agents (DaemonSet %s/%s) gossip on %d too: "+
				"the agents cannot join each other while the speakers run; set another port the same on every node, e.g. helm upgrade ... --reuse-values --set agent.flags.gossipPort=%d "+
				"(without the chart: the agent's --gossip-port), and wait for the agents to roll",
				name, port, a.Namespace, a.Name, port, free)}
		}
	}
	return nil
}

// speakerMemberlistPort is the memberlist port of a MetalLB speaker pod
// spec, and whether memberlist is on at all. MetalLB v0.16 (speaker/main.go,
// internal/speakerlist/speakerlist.go) turns it on when both --ml-labels
// and --ml-bindaddr are set (flags, or their defaults METALLB_ML_LABELS and
// METALLB_ML_BIND_ADDR), on --ml-bindport / METALLB_ML_BIND_PORT, else
// memberlist's 7946.
func speakerMemberlistPort(spec *corev1.PodSpec) (int, bool) {
	for _, c := range spec.Containers {
		v := func(flag, env string) string {
			for _, a := range c.Args {
				if s, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
					return s
				}
			}
			for _, e := range c.Env {
				if e.Name == env {
					if e.ValueFrom != nil {
						return "(from the API)"
					}
					return e.Value
				}
			}
			return ""
		}
		if v("ml-labels", "METALLB_ML_LABELS") == "" || v("ml-bindaddr", "METALLB_ML_BIND_ADDR") == "" {
			continue
		}
		if p, err := strconv.Atoi(v("ml-bindport", "METALLB_ML_BIND_PORT")); err == nil {
			return p, true
		}
		return memberlistDefaultPort, true
	}
	return 0, false
}

// agentGossipPort is the --gossip-port of a Mooring agent pod spec
// (7946 without it).
func agentGossipPort(spec *corev1.PodSpec) int {
	for _, c := range spec.Containers {
		for i, a := range c.Args {
			s, ok := strings.CutPrefix(a, "--gossip-port=")
			if !ok && a == "--gossip-port" && i+1 < len(c.Args) {
				s, ok = c.Args[i+1], true
			}
			if p, err := strconv.Atoi(s); ok && err == nil {
				return p
			}
		}
	}
	return memberlistDefaultPort
}
