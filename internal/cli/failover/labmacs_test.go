package failover

import (
	"context"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mooringlb/mooring/internal/lab"
)

func node(name string, ips ...string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	return n
}

// Against the lab, the node MACs come from its state (no --node-mac); a
// cluster whose Nodes are not the lab's hosts gets none of them.
func TestLabNodeMACs(t *testing.T) {
	st := &lab.State{Hosts: []lab.HostState{
		{Name: "control-plane", Role: "control-plane", Addr4: "10.213.0.2", MAC: "02:6d:00:00:00:02"},
		{Name: "node-1", Role: "node", Addr4: "10.213.0.11", Addr6: "fd00:213::b", MAC: "02:6d:00:00:00:0b"},
		{Name: "node-2", Role: "node", Addr4: "10.213.0.12", Addr6: "fd00:213::c", MAC: "02:6d:00:00:00:0c"},
		{Name: "client", Role: "client", Addr4: "10.213.0.250", MAC: "02:6d:00:00:00:fa"},
	}}
	got := labNodeMACs(st, []corev1.Node{node("node-1", "10.213.0.11", "fd00:213::b"), node("node-2", "fd00:213::c")})
	if len(got) != 2 || got[0].Node != "node-1" || got[0].MAC.String() != "02:6d:00:00:00:0b" || got[1].Node != "node-2" {
		t.Errorf("lab cluster: %v", got)
	}
	if got := labNodeMACs(st, []corev1.Node{node("node-1", "192.0.2.1"), node("worker", "10.213.0.12")}); len(got) != 0 {
		t.Errorf("another cluster: %v, want none", got)
	}
	// No lab running: nothing, silently.
	m, desc := macsFromLab(context.Background(), fake.NewClientset(), filepath.Join(t.TempDir(), "none"))
	if m != nil || desc != "" {
		t.Errorf("no lab: %v %q", m, desc)
	}
}
