package lab

import (
	"context"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooringlb/mooring/internal/kube"
)

// rebootTraceLimit bounds how long traceReboot follows a restored node.
const rebootTraceLimit = 3 * time.Minute

// traceReboot follows a restored real node through the API until every
// pod bound to it runs again, and logs when each step was first seen,
// counted from the restore (since): the kubelet's first lease renewal,
// the Node Ready at a heartbeat after the restore, each pod's containers
// all started after the restore, each such pod Ready, all pods Ready. It
// polls every 250 ms, so each figure is late by up to that.
func (c *Cluster) traceReboot(ctx context.Context, node string, since time.Time) {
	ctx, cancel := context.WithTimeout(ctx, rebootTraceLimit)
	defer cancel()
	var lease, ready time.Duration
	started, podsReady := map[string]time.Duration{}, map[string]time.Duration{}
	log := func(msg string, args ...any) {
		c.log.Info(msg, append([]any{"node", node, "since restore", time.Since(since).Round(time.Millisecond)}, args...)...)
	}
	err := poll(ctx, 250*time.Millisecond, func() (bool, error) {
		if lease == 0 {
			l, err := c.cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, node, metav1.GetOptions{})
			if err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(since) {
				lease = time.Since(since)
				log("reboot: kubelet renewed its lease")
			}
		}
		if ready == 0 {
			n, err := c.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err == nil && nodeReadySince(n, since) {
				ready = time.Since(since)
				log("reboot: Node Ready")
			}
		}
		pods, err := c.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return false, nil
		}
		all := len(pods.Items) > 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			name := p.Namespace + "/" + p.Name
			if _, ok := started[name]; !ok && containersStartedSince(&p, since) {
				started[name] = time.Since(since)
				log("reboot: pod's containers started", "pod", name)
			}
			if _, ok := podsReady[name]; !ok && containersStartedSince(&p, since) && kube.PodReady(&p) {
				podsReady[name] = time.Since(since)
				log("reboot: pod Ready", "pod", name)
			}
			if _, ok := podsReady[name]; !ok {
				all = false
			}
		}
		return ready > 0 && all, nil
	})
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	args := []any{"node", node, "lease renewed", r(lease), "Node Ready", r(ready)}
	for _, name := range slices.Sorted(maps.Keys(started)) {
		args = append(args, name+" started", r(started[name]), name+" Ready", r(podsReady[name]))
	}
	if err != nil {
		c.log.Warn("reboot not followed to the end (0: not seen)", append(args, "err", err)...)
		return
	}
	c.log.Info("node rebooted: every pod bound to it Ready again (since restore)", append(args, "took", r(time.Since(since)))...)
}

// nodeReadySince: n is Ready at a heartbeat after t (whole seconds).
func nodeReadySince(n *corev1.Node, t time.Time) bool {
	for _, cd := range n.Status.Conditions {
		if cd.Type == corev1.NodeReady {
			return cd.Status == corev1.ConditionTrue && !cd.LastHeartbeatTime.Time.Before(t.Truncate(time.Second))
		}
	}
	return false
}

// containersStartedSince: every container of p runs, started at or after
// t (container start times have whole seconds).
func containersStartedSince(p *corev1.Pod, t time.Time) bool {
	if len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil || cs.State.Running.StartedAt.Time.Before(t.Truncate(time.Second)) {
			return false
		}
	}
	return true
}
