package status

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/testenv"
)

// On a real apiserver: ANNOUNCED BY comes from the Nodes, the policy, the
// Services' addresses and the agents' L2Announcers (no annotation), and an
// address an L2Announcer lists as a problem shows its reason.
func TestAgainstAPIServer(t *testing.T) {
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := env.Client
	create := func(o client.Object) {
		t.Helper()
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	nodes := []string{"node-1", "node-2", "node-3"}
	for _, n := range nodes {
		create(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	create(&mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "all"}})
	for name, ip := range map[string]string{"web": "10.213.0.100", "odd": "10.213.0.102"} {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
		create(s)
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
		s.Status.Conditions = []metav1.Condition{{Type: mooringv1.ConditionAddressAssigned, Status: metav1.ConditionTrue,
			Reason: "Assigned", Message: ip, LastTransitionTime: metav1.Now()}}
		if err := c.Status().Update(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	oddOwner := announce.Rank(nodes, netip.MustParseAddr("10.213.0.102"))[0]
	for _, n := range nodes {
		l := &mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: n}}
		create(l)
		l.Status = mooringv1.L2AnnouncerStatus{Members: nodes, Interfaces: []mooringv1.AnnouncerInterface{{Name: "eth0", Index: 2}}}
		if n == oddOwner {
			l.Status.Problems = []mooringv1.AnnouncementProblem{{Address: "10.213.0.102", Services: []string{"default/odd"},
				Reason: mooringv1.ProblemNoMatchingInterface, Message: "none of " + n + "'s interfaces match the policies' interfaces"}}
			l.Status.ProblemCount = 1
		}
		if err := c.Status().Update(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	var out, errw bytes.Buffer
	o := Options{Output: OutputWide, Since: DefaultSince, Announced: FromAPI(c)}
	if err := Run(ctx, env.Clientset, o, &out, &errw); err != nil || errw.Len() > 0 {
		t.Fatalf("status: %v\n%s", err, errw.String())
	}
	rows := lines(out.String())
	webOwner := announce.Rank(nodes, netip.MustParseAddr("10.213.0.100"))[0]
	if w := "10.213.0.100=" + webOwner + "/eth0"; !strings.Contains(rows["web"], w) || !strings.Contains(rows["web"], "True/Assigned") {
		t.Errorf("web row lacks %q:\n%s", w, out.String())
	}
	if w := "NoMatchingInterface (now, " + oddOwner + ")"; !strings.Contains(rows["odd"], w) ||
		!strings.Contains(rows["odd"], "10.213.0.102: none of "+oddOwner+"'s interfaces match") {
		t.Errorf("odd row lacks %q and its message:\n%s", w, out.String())
	}
}
