package podipamctl_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/ipamd"
	"github.com/mooringlb/mooring/internal/podipamctl"
)

// refuseRelease is the annotation that makes refuseReleases' policy
// refuse every write of a PodIPAMNode that lists a block to release.
const refuseRelease = "test.mooring.dev/refuse-release"

// refuseReleases installs an admission policy that refuses, on a
// PodIPAMNode annotated refuseRelease, every write listing a release, and
// returns once the apiserver enforces it.
func refuseReleases(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	pol := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "refuse-release"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{"mooring.dev"}, APIVersions: []string{"*"}, Resources: []string{"podipamnodes"}},
				}}}},
			Validations: []admissionv1.Validation{{
				Expression: fmt.Sprintf(`!has(object.metadata.annotations) || !('%s' in object.metadata.annotations) || !has(object.spec.release) || size(object.spec.release) == 0`, refuseRelease),
				Message:    "the test refuses releases now",
			}},
		}}
	bind := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "refuse-release"},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: pol.Name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}}}
	for _, o := range []client.Object{pol, bind} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// The apiserver picks policies up from an informer: probe until a
	// write it must refuse is refused.
	probe := &mooringv1.PodIPAMNode{ObjectMeta: metav1.ObjectMeta{Name: "probe", Annotations: map[string]string{refuseRelease: "yes"}},
		Spec: mooringv1.PodIPAMNodeSpec{Release: []string{"10.0.0.0/24"}}}
	eventually(t, 30*time.Second, "admission policy enforced", func() error {
		err := c.Create(ctx, probe.DeepCopy())
		if err == nil {
			if derr := c.Delete(ctx, probe.DeepCopy()); derr != nil {
				t.Fatal(derr)
			}
			return fmt.Errorf("a write it must refuse went through")
		}
		return nil
	})
}

// TestNodeSideRetriesALostRelease: a release the agent decided but could
// not write (refused here by an admission policy; in the field a 409 when
// its cache is behind the controller's last status write, or a timeout
// under load) is written again on the next tick once writes go through.
// Before the fix the decision was forgotten with the failed write and the
// block waited a whole grace period more for each lost write (the lab's
// TestPodIPAMMultiPool flake).
func TestNodeSideRetriesALostRelease(t *testing.T) {
	// The grace is long next to the agent's 100 ms tick so that "on the
	// next tick" and "after another grace period" cannot be confused on
	// a loaded machine: the bound below is half the grace.
	const grace = 10 * time.Second
	e := startEnv(t)
	ctx := context.Background()
	c := e.Client
	if err := podipamctl.LockMode(ctx, c, ns, podipamctl.ModeMultiPool, "test"); err != nil {
		t.Fatal(err)
	}
	mkPool(t, c, "default", []string{"10.244.0.0/16"}, 26, nil, 0)
	mkPool(t, c, "blue", []string{"10.245.0.0/16"}, 26, nil, 0)
	blue := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "blue", Annotations: map[string]string{mooringv1.AnnotationPodIPPool: "blue"}}}
	if err := c.Create(ctx, blue); err != nil {
		t.Fatal(err)
	}
	refuseReleases(t, c)
	mkBareNode(t, c, "node-1")
	startPodIPAM(t, e, podipamctl.Config{Mode: podipamctl.ModeMultiPool, PreAllocate: 8})
	cl := startNode(t, e, "node-1", grace)

	add(t, c, cl, "b1", "blue", "b1")
	if b := blocks(t, c, "node-1", "blue"); len(b) != 1 {
		t.Fatalf("one blue pod: blue blocks %v, want one", b)
	}
	annotate := func(v *string) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, refuseRelease)
		if v != nil {
			patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, refuseRelease, *v)
		}
		rec := &mooringv1.PodIPAMNode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
		if err := c.Patch(ctx, rec, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	annotate(ptr.To("yes"))
	if err := cl.Del(ctx, ipamd.Key{ContainerID: "b1", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	// The agent decides the release about one grace period after the
	// DEL; the policy refuses its write.
	time.Sleep(grace + 2*time.Second)
	if b := blocks(t, c, "node-1", "blue"); len(b) != 1 {
		t.Fatalf("the blue block went back although its release was refused: %v", b)
	}
	annotate(nil)
	lifted := time.Now()
	eventually(t, grace/2, "the refused release written again once writes go through", func() error {
		if b := blocks(t, c, "node-1", "blue"); len(b) != 0 {
			return fmt.Errorf("node-1 still holds blue blocks %v %v after writes went through again", b, time.Since(lifted).Round(time.Millisecond))
		}
		return nil
	})
	t.Logf("released %v after writes went through again (grace %v)", time.Since(lifted).Round(time.Millisecond), grace)
}
