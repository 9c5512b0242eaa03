package lab

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentstatus "github.com/mooringlb/mooring/internal/agent/status"
	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab"
)

func newStatusCommand(deps *cliutil.Deps, stateDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the running lab: its namespaces with addresses and MACs, and the demo Service as the apiserver has it now",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := lab.Open(*stateDir)
			if err != nil {
				return err
			}
			printStatus(deps.Streams.Out, h.State)
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			svc, by, err := currentService(ctx, h.State)
			printService(deps.Streams.Out, h.State, svc, by, err)
			return nil
		},
	}
}

func printStatus(w io.Writer, s *lab.State) {
	fmt.Fprintf(w, "lab pid %d, state dir %s, ready %v\nKUBECONFIG=%s\n\n", s.PID, s.Dir, s.Ready, s.Kubeconfig)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tROLE\tIPV4\tIPV6\tMAC")
	for _, h := range s.Hosts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", h.Name, h.Role, h.Addr4, h.Addr6, h.MAC)
	}
	tw.Flush()
	for _, r := range s.Restarts {
		fmt.Fprintf(w, "restarted by `lab restore %s`: %s\n", r.Node, strings.Join(r.Argv, " "))
	}
}

// currentService reads the demo Service from the lab's apiserver, and who
// announces its addresses ("addr=node/if,...", from the agents'
// L2Announcers through agentstatus.Announcements; "" when unknown).
func currentService(ctx context.Context, s *lab.State) (*corev1.Service, string, error) {
	rc, err := kube.RESTConfig(s.Kubeconfig, 5, 10)
	if err != nil {
		return nil, "", err
	}
	rc.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, "", err
	}
	svc, err := cs.CoreV1().Services(lab.DemoNamespace).Get(ctx, lab.DemoService, metav1.GetOptions{})
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(rc, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		return svc, "", nil
	}
	anns, err := agentstatus.Announcements(ctx, c)
	if err != nil {
		return svc, "", nil
	}
	var by []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		ip, err := netip.ParseAddr(in.IP)
		if err != nil {
			continue
		}
		for _, a := range anns {
			if a.Node != "" && a.Addr.Unmap() == ip.Unmap() {
				by = append(by, in.IP+"="+a.Node+"/"+strings.Join(a.Interfaces, "+"))
			}
		}
	}
	return svc, strings.Join(by, ","), nil
}

// printService prints the demo Service as it is now, or why it cannot.
func printService(w io.Writer, s *lab.State, svc *corev1.Service, announcedBy string, err error) {
	name := lab.DemoNamespace + "/" + lab.DemoService
	if err != nil {
		fmt.Fprintf(w, "\nService %s: cannot read it from the apiserver: %v\n", name, err)
		return
	}
	class := "<none>"
	if svc.Spec.LoadBalancerClass != nil {
		class = *svc.Spec.LoadBalancerClass
	}
	var ingress []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		ingress = append(ingress, in.IP)
	}
	lb := strings.Join(ingress, ", ")
	if lb == "" {
		lb = "<pending>"
	}
	fmt.Fprintf(w, "\nService %s (now): type %s, class %s, ClusterIP %s, LoadBalancer %s\n", name,
		svc.Spec.Type, class, strings.Join(svc.Spec.ClusterIPs, ", "), lb)
	if announcedBy != "" {
		fmt.Fprintf(w, "announced by: %s\n", announcedBy)
	}
	fmt.Fprintf(w, "mooring failover reads the node MACs from %s/state.json (no --node-mac needed)\n", s.Dir)
}
