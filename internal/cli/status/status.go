// Package status is the `mooring status` verb: one table that says, for
// every LoadBalancer Service, which addresses it holds, why any is pending,
// and which node announces each address — the truth an operator otherwise
// assembles from three kubectl commands.
package status

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/kube"
)

// NewCommand builds `mooring status`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	var kubeconfig, namespace string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List LoadBalancer Services: addresses, pending reasons, announcing node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := kube.RESTConfig(kubeconfig, 20, 40)
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			return Run(cmd.Context(), cs, namespace, deps.Streams.Out)
		},
	}
	cliutil.AddKubeconfigFlag(cmd, &kubeconfig)
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "only this namespace (default: all)")
	return cmd
}

// Run lists the Services and prints the table.
func Run(ctx context.Context, cs kubernetes.Interface, namespace string, w io.Writer) error {
	list, err := cs.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list Services: %w", err)
	}
	rows := Rows(list.Items)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tADDRESSES\tASSIGNED\tANNOUNCED BY\tMESSAGE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.Name, r.Addresses, r.Assigned, r.AnnouncedBy, r.Message)
	}
	return tw.Flush()
}

// Row is one Service's line.
type Row struct {
	Namespace, Name, Addresses, Assigned, AnnouncedBy, Message string
}

// Rows turns LoadBalancer Services into sorted rows; other Services are
// skipped.
func Rows(svcs []corev1.Service) []Row {
	var rows []Row
	for _, s := range svcs {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		r := Row{Namespace: s.Namespace, Name: s.Name, Addresses: "<pending>", Assigned: "-", AnnouncedBy: "-"}
		var ips []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				ips = append(ips, in.IP)
			}
		}
		if len(ips) > 0 {
			r.Addresses = strings.Join(ips, ",")
		}
		var msgs []string
		for _, c := range s.Status.Conditions {
			switch c.Type {
			case mooringv1.ConditionAddressAssigned:
				r.Assigned = string(c.Status) + "/" + c.Reason
				if c.Status != metav1.ConditionTrue && c.Message != "" {
					msgs = append(msgs, c.Message)
				}
			case mooringv1.ConditionAddressOutsidePools:
				if c.Status == metav1.ConditionTrue {
					msgs = append(msgs, c.Message)
				}
			}
		}
		if v := s.Annotations[mooringv1.AnnotationAnnouncedBy]; v != "" {
			r.AnnouncedBy = v
		}
		r.Message = strings.Join(msgs, " ")
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Namespace != rows[j].Namespace {
			return rows[i].Namespace < rows[j].Namespace
		}
		return rows[i].Name < rows[j].Name
	})
	return rows
}
