package cluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The memberlist port of MetalLB's speaker and the gossip port of
// Mooring's agent, read from their pod specs as each program reads its
// flags and environment.
func TestGossipPorts(t *testing.T) {
	fromAPI := &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}
	// As metallb-native.yaml (v0.16.2) sets the speaker up.
	native := []corev1.EnvVar{{Name: "METALLB_ML_BIND_ADDR", ValueFrom: fromAPI}, {Name: "METALLB_ML_LABELS", Value: "app=metallb,component=speaker"},
		{Name: "METALLB_ML_SECRET_KEY_PATH", Value: "/etc/ml_secret_key"}}
	speaker := func(args []string, env ...corev1.EnvVar) *corev1.PodSpec {
		return &corev1.PodSpec{Containers: []corev1.Container{{Name: "speaker", Args: args, Env: env}}}
	}
	for name, c := range map[string]struct {
		spec *corev1.PodSpec
		port int
		on   bool
	}{
		"native manifest":           {speaker([]string{"--port=7472"}, native...), 7946, true},
		"env port":                  {speaker(nil, append(native, corev1.EnvVar{Name: "METALLB_ML_BIND_PORT", Value: "7950"})...), 7950, true},
		"flag port over env":        {speaker([]string{"--ml-bindport=8000"}, append(native, corev1.EnvVar{Name: "METALLB_ML_BIND_PORT", Value: "7950"})...), 8000, true},
		"flags only":                {speaker([]string{"--ml-bindaddr=0.0.0.0", "--ml-labels=app=metallb"}), 7946, true},
		"no labels: memberlist off": {speaker(nil, native[0]), 0, false},
		"no bind address: off":      {speaker(nil, native[1]), 0, false},
	} {
		if port, on := speakerMemberlistPort(c.spec); port != c.port || on != c.on {
			t.Errorf("%s: speaker memberlist %d %v, want %d %v", name, port, on, c.port, c.on)
		}
	}
	agent := func(args ...string) *corev1.PodSpec {
		return &corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Args: args}}}
	}
	for name, c := range map[string]struct {
		spec *corev1.PodSpec
		port int
	}{
		"chart default":  {agent("agent", "--gossip-port=7946", "--node-name=$(NODE_NAME)"), 7946},
		"chart moved":    {agent("agent", "--gossip-port=7947"), 7947},
		"separate value": {agent("agent", "--gossip-port", "7948"), 7948},
		"no flag":        {agent("agent"), 7946},
	} {
		if got := agentGossipPort(c.spec); got != c.port {
			t.Errorf("%s: agent gossip port %d, want %d", name, got, c.port)
		}
	}
}
