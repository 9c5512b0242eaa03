package lab

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/lab"
)

func newStatusCommand(deps *cliutil.Deps, stateDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the running lab: its namespaces with addresses and MACs, and the demo Service",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			h, err := lab.Open(*stateDir)
			if err != nil {
				return err
			}
			printStatus(deps.Streams.Out, h.State)
			return nil
		},
	}
}

func printStatus(w interface{ Write([]byte) (int, error) }, s *lab.State) {
	fmt.Fprintf(w, "lab pid %d, state dir %s, ready %v\nKUBECONFIG=%s\n\n", s.PID, s.Dir, s.Ready, s.Kubeconfig)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tROLE\tIPV4\tIPV6\tMAC")
	var macs []string
	for _, h := range s.Hosts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", h.Name, h.Role, h.Addr4, h.Addr6, h.MAC)
		if h.Role == "node" {
			macs = append(macs, "--node-mac "+h.Name+"="+h.MAC)
		}
	}
	tw.Flush()
	if sv := s.Service; sv != nil {
		fmt.Fprintf(w, "\nService %s/%s port %d: ClusterIP %s, LoadBalancer %s\n", sv.Namespace, sv.Name, sv.Port,
			strings.Join(sv.ClusterIP, ", "), strings.Join(sv.Ingress, ", "))
	}
	fmt.Fprintf(w, "\nfor mooring failover: %s\n", strings.Join(macs, " "))
}
