//go:build linux

package agent_test

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooringlb/mooring/internal/agent/evict"
)

// Fast endpoint eviction, end to end (issue 9 item 8): real agents with
// their ServiceAccount tokens (RBAC and the pod admission policy apply),
// real gossip and ARP in namespaces. An agent stalled past
// --agent-loss-timeout while its kernel answers is not a dead node:
// nothing is marked. A hard kill (agent gone, link down) is: the dead
// node's Ready pods, and only those, turn NotReady with Mooring's reason,
// with an Event on the Node, written by one agent.
func TestE2EFastEvictionOnlyWhenTheKernelIsSilent(t *testing.T) {
	c := newCluster(t, 3, nil)
	cs := c.env.Clientset
	victim := c.lab.Host("node-1") // the smallest name: the decider is another node
	onVictim := []*corev1.Pod{readyPod(c.ctx, t, cs, "web-1", "node-1"), readyPod(c.ctx, t, cs, "web-2", "node-1")}
	elsewhere := readyPod(c.ctx, t, cs, "web-3", "node-3")
	c.startAgents("--fast-endpoint-eviction", "--agent-loss-timeout", "2s")
	waitFor(t, 20*time.Second, "three live members everywhere", func() (bool, string) {
		for _, n := range c.lab.Nodes() {
			if v, err := c.scrape(n, "mooring_members_live"); err != nil || v != 3 {
				return false, fmt.Sprintf("%s: %v %v", n.Name, v, err)
			}
		}
		return true, ""
	})
	ready := func(p *corev1.Pod) corev1.PodCondition {
		got, err := cs.CoreV1().Pods(p.Namespace).Get(c.ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return condition(got, corev1.PodReady)
	}

	// The victim's agent stalls for 4 s, twice its agent-loss timeout:
	// gossip drops it, but its kernel answers.
	stalled := c.agents[victim.Name]
	if err := unix.Kill(-stalled.PID, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	for _, p := range append(onVictim, elsewhere) {
		if r := ready(p); r.Status != corev1.ConditionTrue {
			t.Errorf("%s during the stall: Ready %s (%s)", p.Name, r.Status, r.Reason)
		}
	}
	if err := unix.Kill(-stalled.PID, unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the stalled member back", func() (bool, string) {
		v, err := c.scrape(c.lab.Host("node-2"), "mooring_members_live")
		return err == nil && v == 3, fmt.Sprint(v, err)
	})

	// Hard loss: its link down, its agent killed.
	kill := c.killNode(victim)
	waitFor(t, 15*time.Second, "the dead node's pods NotReady", func() (bool, string) {
		for _, p := range onVictim {
			if r := ready(p); r.Status != corev1.ConditionFalse || r.Reason != evict.PodReasonNodeUnreachable {
				return false, fmt.Sprintf("%s: %s %s", p.Name, r.Status, r.Reason)
			}
		}
		return true, ""
	})
	t.Logf("pods of the killed node NotReady %v after the kill", time.Since(kill).Round(time.Millisecond))
	if r := ready(elsewhere); r.Status != corev1.ConditionTrue {
		t.Errorf("a pod on a live node: Ready %s (%s)", r.Status, r.Reason)
	}
	ev := c.waitEvent(victim.Name, "MooringPodsMarkedNotReady", 5*time.Second)
	t.Logf("event: %s", ev.Message)
	marked := 0.0
	for _, n := range c.lab.Nodes()[1:] {
		v, err := c.scrape(n, "mooring_agent_fast_eviction_pods_total")
		if err != nil {
			t.Fatal(err)
		}
		marked += v
	}
	if marked != 2 {
		t.Errorf("pods marked NotReady across the agents: %v, want 2 (one writer)", marked)
	}
}
