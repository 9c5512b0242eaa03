package failover

import (
	"context"
	"net"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	fo "github.com/mooringlb/mooring/internal/failover"
	"github.com/mooringlb/mooring/internal/lab"
)

// macsFromLab returns the node MACs of the lab running with stateDir when
// the cluster is that lab, and a description of them; nothing when no lab
// runs there or the cluster is another one.
func macsFromLab(ctx context.Context, client kubernetes.Interface, stateDir string) (fo.NodeMACs, string) {
	h, err := lab.Open(stateDir)
	if err != nil {
		return nil, ""
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, ""
	}
	m := labNodeMACs(h.State, nodes.Items)
	if len(m) == 0 {
		return nil, ""
	}
	s := make([]string, len(m))
	for i, nm := range m {
		s[i] = nm.Node + "=" + nm.MAC.String()
	}
	return m, stateDir + ": " + strings.Join(s, " ")
}

// labNodeMACs maps the lab's node MACs to their names, for the lab's nodes
// that are Nodes of this cluster: same name and an InternalIP of the lab
// host. Another cluster (or another lab) yields nothing.
func labNodeMACs(st *lab.State, nodes []corev1.Node) fo.NodeMACs {
	var out fo.NodeMACs
	for _, h := range st.Hosts {
		if h.Role != "node" {
			continue
		}
		i := slices.IndexFunc(nodes, func(n corev1.Node) bool {
			return n.Name == h.Name && slices.ContainsFunc(n.Status.Addresses, func(a corev1.NodeAddress) bool {
				return a.Type == corev1.NodeInternalIP && (a.Address == h.Addr4 || a.Address == h.Addr6)
			})
		})
		mac, err := net.ParseMAC(h.MAC)
		if i < 0 || err != nil {
			continue
		}
		out = append(out, fo.NodeMAC{Node: h.Name, MAC: mac})
	}
	return out
}
