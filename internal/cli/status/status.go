// Package status is the `mooring status` verb: one table that says, for
// every LoadBalancer Service, which addresses it holds, why any is pending,
// which node announces each address, and what the agents recently saw go
// wrong (split brain, stale local copies) — the truth an operator otherwise
// assembles from four kubectl commands.
package status

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	agentstatus "github.com/mooringlb/mooring/internal/agent/status"
	"github.com/mooringlb/mooring/internal/bgpagent"
	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/controller"
	"github.com/mooringlb/mooring/internal/kube"
)

// DefaultSince is how far back PROBLEMS looks: the apiserver's default
// Event time to live, so by default every Event still stored counts.
const DefaultSince = time.Hour

// Options are what `mooring status` shows.
type Options struct {
	Namespace string // empty: all namespaces
	Output    string // table, wide, json or yaml
	// Since bounds the age of the Events shown as problems.
	Since time.Duration
	// Now is the reference for ages; the zero value means time.Now().
	Now time.Time
	// Announced reads who announces each address (FromAPI); nil leaves
	// ANNOUNCED BY empty.
	Announced func(context.Context) (Announced, error)
	// PodIPAM reads pod IPAM (PodIPAMFromAPI); nil, or a nil result (mode
	// off), prints no pod IPAM section.
	PodIPAM func(context.Context) (*PodIPAM, error)
	// Others reads how Mooring's controller runs and who else serves
	// LoadBalancer Services (OthersFromAPI); nil: not read.
	Others func(context.Context, time.Time) (Others, error)
	// BGP reads what the agents advertise over BGP (BGPFromAPI); nil: no
	// ADVERTISED BY column and no BGP SESSIONS section.
	BGP func(context.Context) (bgpagent.Advertised, error)
}

// FromAPI reads Announced through r: internal/agent/status.Announcements recomputes the
// agents' decision from the Services, EndpointSlices, Nodes, policies and
// L2Announcers (cluster-wide lists, whatever -n says), and the
// L2Announcers' status.problems are listed as they are.
func FromAPI(r client.Reader) func(context.Context) (Announced, error) {
	return func(ctx context.Context) (Announced, error) {
		anns, err := agentstatus.Announcements(ctx, r)
		if err != nil {
			return Announced{}, err
		}
		var l mooringv1.L2AnnouncerList
		if err := r.List(ctx, &l); err != nil {
			return Announced{}, fmt.Errorf("listing L2Announcers: %w", err)
		}
		return Announced{Known: true, Announcements: anns, Announcers: l.Items}, nil
	}
}

// NewCommand builds `mooring status`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	var kubeconfig string
	leaseNS, leaseName := controller.DefaultLeaseNamespace, controller.DefaultLeaseName
	o := Options{Output: OutputTable, Since: DefaultSince}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List LoadBalancer Services: addresses, pending reasons, announcing and advertising nodes, BGP sessions, recent problems",
		Long: `status lists every Service of type LoadBalancer: the addresses it holds (or
<pending>, or <other class> when another implementation's loadBalancerClass
serves it), the controller's AddressAssigned condition, the node and interface
announcing each address (recomputed from the API objects and the agents'
L2Announcers, as the agents decide), and PROBLEMS: why an address is not
announced now (the L2Announcers' status.problems, e.g. NoEligibleNode,
NoMatchingInterface, ResponderFailed: the owner's agent cannot answer ARP/NDP,
so ANNOUNCED BY shows - for that address), then the Warning Events Mooring's agents recorded on the
Service within --since (split brain, a stale local copy of the address). An
Event says a problem was seen then;
` + "`mooring audit arp`" + ` checks the segment now. During a migration it says who
serves each address now: MetalLB's speaker (its ServiceL2Status) or Cilium's
lease holder appear in ANNOUNCED BY with their name, and a Service that the
controller leaves alone under --adopt-only says so instead of "not seen". With BGP
objects in the cluster, ADVERTISED BY names the nodes that advertise each address
over an Established session (every node's BGP decision recomputed from the API, and
the nodes' BGPSpeakers; NotAdvertised when none of the sessions carrying it is up,
and an address BGP serves is no NotAnnounced problem of L2's), and a BGP SESSIONS
table lists every node's sessions: state, since when, BFD, prefixes sent and
received, and the reason when not Established (-o wide: the message). With pod IPAM on, a second
table gives the recorded mode and, per node, its blocks (pool=CIDR), its
node.spec.podCIDRs and pod IPAM problems (MooringPodCIDRMismatch, Exhausted).
See docs/status.md.`,
		Example: `  mooring status
  mooring status -n demo -o wide
  mooring status -o json | jq '.services[] | select(.problems)'`,
		Args: cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error {
			switch {
			case o.Output != OutputTable && o.Output != OutputWide && o.Output != OutputJSON && o.Output != OutputYAML:
				return fmt.Errorf("-o %q: use table, wide, json or yaml", o.Output)
			case o.Since < 0:
				return fmt.Errorf("--since %s: must not be negative (0 shows no Events)", o.Since)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := kube.RESTConfig(kubeconfig, 20, 40)
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
			if err != nil {
				return err
			}
			dc, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return err
			}
			o.Announced = FromAPI(c)
			o.PodIPAM = PodIPAMFromAPI(c, controller.DefaultLeaseNamespace)
			o.Others = OthersFromAPI(cs, dc, leaseNS, leaseName)
			o.BGP = BGPFromAPI(c)
			return Run(cmd.Context(), cs, o, deps.Streams.Out, deps.Streams.Err)
		},
	}
	cliutil.AddKubeconfigFlag(cmd, &kubeconfig)
	cmd.Flags().StringVarP(&o.Namespace, "namespace", "n", "", "only this namespace (default: all)")
	cmd.Flags().StringVarP(&o.Output, "output", "o", o.Output, "output format: table, wide (whole messages, every problem), json or yaml")
	cmd.Flags().DurationVar(&o.Since, "since", o.Since, "show problems (agents' Warning Events) seen within this long")
	cmd.Flags().StringVar(&leaseNS, "lease-namespace", leaseNS, "namespace of the Mooring controller's leader-election Lease (where it publishes --adopt-only)")
	cmd.Flags().StringVar(&leaseName, "lease-name", leaseName, "name of the Mooring controller's leader-election Lease")
	return cmd
}

// Run lists the Services and their Events and prints them. Without
// permission to list Events it says so on errw and prints the rest.
func Run(ctx context.Context, cs kubernetes.Interface, o Options, w, errw io.Writer) error {
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	svcs, err := cs.CoreV1().Services(o.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Services: %w", err)
	}
	var events []corev1.Event
	evs, err := cs.CoreV1().Events(o.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.kind", "Service").String(),
	})
	if err != nil {
		fmt.Fprintf(errw, "warning: listing Events failed, so PROBLEMS is empty: %v\n", err)
	} else {
		events = evs.Items
	}
	var an Announced
	if o.Announced != nil {
		if an, err = o.Announced(ctx); err != nil {
			an = Announced{}
			fmt.Fprintf(errw, "warning: reading the announcements failed, so ANNOUNCED BY is empty and PROBLEMS has only Events: %v\n", err)
		}
	}
	if o.Others != nil {
		if an.Others, err = o.Others(ctx, now); err != nil {
			an.Others = Others{}
			fmt.Fprintf(errw, "warning: reading the Mooring controller's mode and other load balancers failed, so status cannot say whether another implementation serves a Service: %v\n", err)
		}
	}
	if o.BGP != nil {
		if an.BGP, err = o.BGP(ctx); err != nil {
			an.BGP = bgpagent.Advertised{}
			fmt.Fprintf(errw, "warning: reading BGP (peers, advertisements, the nodes' BGPSpeakers) failed, so ADVERTISED BY and BGP SESSIONS are not shown: %v\n", err)
		}
	}
	var pi *PodIPAM
	if o.PodIPAM != nil {
		if pi, err = o.PodIPAM(ctx); err != nil {
			pi = nil
			fmt.Fprintf(errw, "warning: reading pod IPAM failed, so it is not shown: %v\n", err)
		}
	}
	rows := Rows(svcs.Items, events, an, now.Add(-o.Since), now)
	l := List{Services: nonNil(rows), PodIPAM: pi, Notes: an.Others.Notes()}
	if an.BGP.Known {
		l.BGP = &BGP{Sessions: nonNilSessions(bgpSessions(an.BGP))}
	}
	return printDoc(w, o.Output, l, now)
}
