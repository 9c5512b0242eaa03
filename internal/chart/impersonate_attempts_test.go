package chart

import (
	"context"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
)

var (
	dryPatch  = metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	dryCreate = metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	dryDelete = metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	dryUpdate = metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
)

// patchNode merge-patches a Node (or its status with sub "status").
func patchNode(name, patch string, sub ...string) func(context.Context, *actor) error {
	return func(ctx context.Context, a *actor) error {
		_, err := a.cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), dryPatch, sub...)
		return err
	}
}

// updateRecord reads a node's PodIPAMNode as the administrator, changes it
// and updates it (spec, or status with status true) as the actor: the
// agent's role has update, not patch.
func updateRecord(admin client.Client, name string, status bool, change func(*mooringv1.PodIPAMNode)) func(context.Context, *actor) error {
	return func(ctx context.Context, a *actor) error {
		var rec mooringv1.PodIPAMNode
		if err := admin.Get(ctx, client.ObjectKey{Name: name}, &rec); err != nil {
			return err
		}
		change(&rec)
		if status {
			return a.c.Status().Update(ctx, &rec)
		}
		return a.c.Update(ctx, &rec)
	}
}

// updateAnnouncer writes a node's L2Announcer status as the actor.
func updateAnnouncer(admin client.Client, name string) func(context.Context, *actor) error {
	return func(ctx context.Context, a *actor) error {
		var an mooringv1.L2Announcer
		if err := admin.Get(ctx, client.ObjectKey{Name: name}, &an); err != nil {
			return err
		}
		an.Status.Members = []string{name}
		return a.c.Status().Update(ctx, &an)
	}
}

// markNotReady is fast eviction's write, as the agent makes it (the pod
// readiness policy allows exactly this change): the pod of node in ns set
// NotReady with Mooring's reason. With as set, that actor writes.
func markNotReady(ns, node string, as *actor) func(context.Context, *actor) error {
	body := `{"status":{"conditions":[` +
		`{"type":"Ready","status":"False","reason":"MooringNodeUnreachable","message":"dead"},` +
		`{"type":"ContainersReady","status":"False","reason":"MooringNodeUnreachable","message":"dead"}]}}`
	return func(ctx context.Context, a *actor) error {
		if as != nil {
			a = as
		}
		_, err := a.cs.CoreV1().Pods(ns).Patch(ctx, "web-"+node, types.StrategicMergePatchType, []byte(body), dryPatch, "status")
		return err
	}
}

func createObj(obj client.Object) func(context.Context, *actor) error {
	return func(ctx context.Context, a *actor) error {
		return a.c.Create(ctx, obj.DeepCopyObject().(client.Object))
	}
}

func list(l client.ObjectList, opts ...client.ListOption) func(context.Context, *actor) error {
	return func(ctx context.Context, a *actor) error { return a.c.List(ctx, l, opts...) }
}

// commonRefusals are what neither component may do: take more rights,
// switch off the admission policies, read Secrets, run pods.
func commonRefusals(in *install) []attempt {
	return []attempt{
		{what: "read Secrets", do: list(&corev1.SecretList{}, client.InNamespace(in.ns))},
		{what: "bind itself cluster-admin", do: func(ctx context.Context, a *actor) error {
			_, err := a.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "escalate"},
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: in.agent, Namespace: in.ns}},
			}, dryCreate)
			return err
		}},
		{what: "switch off the own-node admission policy", do: func(ctx context.Context, a *actor) error {
			return a.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, in.prefix+"-agent-own-node", dryDelete)
		}},
		{what: "create a pod", do: func(ctx context.Context, a *actor) error {
			_, err := a.cs.CoreV1().Pods(in.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Spec: corev1.PodSpec{NodeName: in.nodeB, Containers: []corev1.Container{{Name: "x", Image: "x"}}}}, dryCreate)
			return err
		}},
		{what: "delete a Node", do: func(ctx context.Context, a *actor) error {
			return a.cs.CoreV1().Nodes().Delete(ctx, in.nodeB, dryDelete)
		}},
		{what: "patch a Service", do: func(ctx context.Context, a *actor) error {
			_, err := a.cs.CoreV1().Services(in.ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"externalIPs":["192.0.2.66"]}}`), dryPatch)
			return err
		}},
		{what: "create a LoadBalancerIPPool", do: createObj(&mooringv1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "squat"},
			Spec: mooringv1.LoadBalancerIPPoolSpec{Blocks: []mooringv1.IPBlock{{CIDR: "192.0.2.0/24"}}}})},
	}
}

// agentAttempts is the agent's list, as the agent of nodeA.
func agentAttempts(in *install, admin client.Client) []attempt {
	out := []attempt{
		{what: "patch another Node", do: patchNode(in.nodeB, `{"metadata":{"labels":{"evil":"yes"}}}`)},
		{what: "patch its own Node", do: patchNode(in.nodeA, `{"spec":{"unschedulable":true}}`)},
		{what: "write another Node's addresses", do: patchNode(in.nodeB, `{"status":{"addresses":[{"type":"InternalIP","address":"192.0.2.66"}]}}`, "status")},
		{what: "create another node's PodIPAMNode", do: createObj(&mooringv1.PodIPAMNode{ObjectMeta: metav1.ObjectMeta{Name: in.nodeB}})},
		{what: "put another node's block into its spec.release", do: updateRecord(admin, in.nodeB, false, func(r *mooringv1.PodIPAMNode) {
			r.Spec.Release = []string{in.blockB}
		})},
		{what: "change another node's demand", do: updateRecord(admin, in.nodeB, false, func(r *mooringv1.PodIPAMNode) {
			r.Spec.Requests = []mooringv1.PodIPAMRequest{{Pool: "default", IPv4Addresses: 4096}}
		})},
		{what: "write its own PodIPAMNode's status (the blocks are the controller's)", do: updateRecord(admin, in.nodeA, true, func(r *mooringv1.PodIPAMNode) {
			r.Status.Blocks = append(r.Status.Blocks, mooringv1.PodIPAMBlock{Pool: "default", CIDR: in.blockB})
		})},
		{what: "delete another node's PodIPAMNode", do: func(ctx context.Context, a *actor) error {
			return a.c.Delete(ctx, &mooringv1.PodIPAMNode{ObjectMeta: metav1.ObjectMeta{Name: in.nodeB}})
		}},
		{what: "change the recorded pod IPAM mode", do: func(ctx context.Context, a *actor) error {
			var cm corev1.ConfigMap
			if err := admin.Get(ctx, client.ObjectKey{Namespace: in.ns, Name: "mooring-pod-ipam-mode"}, &cm); err != nil {
				return err
			}
			cm.Data["mode"] = "kubernetes"
			_, err := a.cs.CoreV1().ConfigMaps(in.ns).Update(ctx, &cm, dryUpdate)
			return err
		}},
		{what: "patch the recorded pod IPAM mode", do: func(ctx context.Context, a *actor) error {
			_, err := a.cs.CoreV1().ConfigMaps(in.ns).Patch(ctx, "mooring-pod-ipam-mode", types.MergePatchType, []byte(`{"data":{"mode":"kubernetes"}}`), dryPatch)
			return err
		}},
		{what: "delete the recorded pod IPAM mode", do: func(ctx context.Context, a *actor) error {
			return a.cs.CoreV1().ConfigMaps(in.ns).Delete(ctx, "mooring-pod-ipam-mode", dryDelete)
		}},
		{what: "write a Service's status", do: func(ctx context.Context, a *actor) error {
			_, err := a.cs.CoreV1().Services(in.ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.66"}]}}}`), dryPatch, "status")
			return err
		}},
		{what: "write another node's L2Announcer", do: updateAnnouncer(admin, in.nodeB)},
		{what: "create an L2Announcer for another node", do: createObj(&mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: in.nodeB + "-new"}})},
		{what: "take the controller's Lease", do: createObj(&coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: in.ns, Name: "mooring-controller"}})},
		{what: "write a PodIPPool's status", do: func(ctx context.Context, a *actor) error {
			return a.c.Status().Patch(ctx, &mooringv1.PodIPPool{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, client.RawPatch(types.MergePatchType, []byte(`{"status":{}}`)))
		}},

		// Fast eviction's bound: only pods of a node its own L2Announcer
		// lists in status.lost, never its own node's (though listed), not
		// one that only another node's L2Announcer lists, and only with
		// a token that names its node.
		{what: "mark a pod on a live node NotReady", do: markNotReady(in.ns, in.nodeB, nil)},
		{what: "mark a pod of its own node NotReady", do: markNotReady(in.ns, in.nodeA, nil)},
		{what: "mark a pod NotReady with an unbound token", do: markNotReady(in.ns, in.deadNode(), in.unboundAgent)},
		{what: "mark NotReady a pod of a node its L2Announcer lists as lost", allow: true, do: markNotReady(in.ns, in.deadNode(), nil)},

		{what: "create another node's BGPSpeaker", do: createObj(&mooringv1.BGPSpeaker{ObjectMeta: metav1.ObjectMeta{Name: in.nodeB}})},
		{what: "read a Secret outside its namespace", do: func(ctx context.Context, a *actor) error {
			_, err := a.cs.CoreV1().Secrets("kube-system").Get(ctx, "bgp-pass", metav1.GetOptions{})
			return err
		}},
		{what: "change a BGPPeer", do: func(ctx context.Context, a *actor) error {
			return a.c.Patch(ctx, &mooringv1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor"}}, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"peerAddress":"192.0.2.66"}}`)))
		}},

		{what: "create its own BGPSpeaker", allow: true, do: createObj(&mooringv1.BGPSpeaker{ObjectMeta: metav1.ObjectMeta{Name: in.nodeA}})},
		{what: "read a peer's password Secret (get)", allow: true, do: func(ctx context.Context, a *actor) error {
			_, err := a.cs.CoreV1().Secrets(in.ns).Get(ctx, "bgp-pass", metav1.GetOptions{})
			return err
		}},
		{what: "list BGPPeers", allow: true, do: list(&mooringv1.BGPPeerList{})},

		{what: "create its own PodIPAMNode", allow: true, do: createObj(&mooringv1.PodIPAMNode{ObjectMeta: metav1.ObjectMeta{Name: in.nodeA}})},
		{what: "give back its own block (spec.release)", allow: true, do: updateRecord(admin, in.nodeA, false, func(r *mooringv1.PodIPAMNode) {
			r.Spec.Release = []string{in.blockA}
		})},
		{what: "create its own L2Announcer", allow: true, do: createObj(&mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: in.nodeA}})},
		{what: "write its own L2Announcer", allow: true, do: updateAnnouncer(admin, in.nodeA)},
		{what: "read the recorded pod IPAM mode", allow: true, do: func(ctx context.Context, a *actor) error {
			_, err := a.cs.CoreV1().ConfigMaps(in.ns).Get(ctx, "mooring-pod-ipam-mode", metav1.GetOptions{})
			return err
		}},
		{what: "list Services", allow: true, do: list(&corev1.ServiceList{})},
		{what: "list Nodes", allow: true, do: list(&corev1.NodeList{})},
		{what: "list PodIPPools", allow: true, do: list(&mooringv1.PodIPPoolList{})},
		{what: "record an Event", allow: true, do: func(ctx context.Context, a *actor) error {
			_, err := a.cs.CoreV1().Events("default").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e"},
				InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: in.nodeA}, Reason: "Test"}, dryCreate)
			return err
		}},
	}
	return append(out, commonRefusals(in)...)
}

// controllerAttempts is the controller's list.
func controllerAttempts(in *install, admin client.Client) []attempt {
	out := []attempt{
		{what: "write an L2Announcer", do: updateAnnouncer(admin, in.nodeB)},
		{what: "create an L2Announcer", do: createObj(&mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: in.nodeA + "-ctl"}})},
		{what: "put a node's block into its spec.release", do: updateRecord(admin, in.nodeB, false, func(r *mooringv1.PodIPAMNode) {
			r.Spec.Release = []string{in.blockB}
		})},
		{what: "mark a pod NotReady", do: func(ctx context.Context, a *actor) error {
			_, err := a.cs.CoreV1().Pods(in.ns).Patch(ctx, "web-"+in.nodeB, types.MergePatchType, []byte(`{"status":{"phase":"Failed"}}`), dryPatch, "status")
			return err
		}},
		{what: "write a Service's status", allow: true, do: func(ctx context.Context, a *actor) error {
			_, err := a.cs.CoreV1().Services(in.ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.66"}]}}}`), dryPatch, "status")
			return err
		}},
		{what: "take its Lease", allow: true, do: createObj(&coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: in.ns, Name: "mooring-controller"}})},
		{what: "cut a node's blocks (PodIPAMNode status)", allow: true, do: updateRecord(admin, in.nodeB, true, func(r *mooringv1.PodIPAMNode) {
			r.Status.Mode = "multi-pool"
		})},
		{what: "delete a gone node's PodIPAMNode", allow: true, do: func(ctx context.Context, a *actor) error {
			return a.c.Delete(ctx, &mooringv1.PodIPAMNode{ObjectMeta: metav1.ObjectMeta{Name: in.nodeB}})
		}},
		{what: "record the pod IPAM mode", allow: true, do: func(ctx context.Context, a *actor) error {
			cm, err := a.cs.CoreV1().ConfigMaps(in.ns).Get(ctx, "mooring-pod-ipam-mode", metav1.GetOptions{})
			if err != nil {
				return err
			}
			_, err = a.cs.CoreV1().ConfigMaps(in.ns).Update(ctx, cm, dryUpdate)
			return err
		}},
		{what: "write a Node's spec.podCIDRs", allow: true, do: patchNode(in.nodeB, `{"spec":{"podCIDR":"10.244.2.0/24","podCIDRs":["10.244.2.0/24"]}}`)},
		{what: "record an Event", allow: true, do: func(ctx context.Context, a *actor) error {
			_, err := a.cs.EventsV1().Events("default").Create(ctx, &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e"},
				EventTime: metav1.NowMicro(), ReportingController: "mooring.dev/test", ReportingInstance: "x", Action: "Test", Reason: "Test",
				Type: corev1.EventTypeNormal, Regarding: corev1.ObjectReference{Kind: "Node", Name: in.nodeB}}, dryCreate)
			return err
		}},
	}
	return append(out, commonRefusals(in)...)
}
