// Package importcmd is the `mooring import metallb|cilium` verb: it reads
// the other system's configuration from files or, read-only, from a
// cluster, prints the Mooring objects, and reports what became of every
// field. The conversion itself is internal/importer.
package importcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/importer"
	"github.com/mooringlb/mooring/internal/kube"
)

// Options are the verb's flags.
type Options struct {
	Files       []string
	FromCluster bool
	Kubeconfig  string
	Output      string // yaml or json
	ReportFile  string
	// MetalLBNamespace is where the pre-0.13 ConfigMap "config" is looked for.
	MetalLBNamespace string
}

// NewCommand builds `mooring import`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import metallb|cilium",
		Short: "Translate MetalLB or Cilium LB configuration into Mooring pools and L2 policies, with a report of every field",
		// `mooring import foo -f x`: cobra stops at import and parses -f as
		// import's flag; say what is wrong instead: the source.
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownSource(args[0])
			}
			return errors.New("say what to import from: mooring import metallb or mooring import cilium")
		},
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if a := c.Flags().Args(); c == cmd && len(a) > 0 {
			return unknownSource(a[0])
		}
		return err
	})
	cmd.AddCommand(newSub(deps, "metallb", "MetalLB: pre-0.13 ConfigMap, AddressPool, IPAddressPool, L2Advertisement, BGPPeer, BGPAdvertisement, Community, BFDProfile", importer.MetalLB),
		newSub(deps, "cilium", "Cilium: CiliumLoadBalancerIPPool (v2alpha1, v2) and CiliumL2AnnouncementPolicy", importer.Cilium))
	return cmd
}

func unknownSource(s string) error {
	return fmt.Errorf("unknown source %q: import from metallb or cilium (mooring import metallb -f FILE|DIR, mooring import cilium --from-cluster)", s)
}

func newSub(deps *cliutil.Deps, system, short string, imp func([]importer.Input) (*importer.Result, error)) *cobra.Command {
	o := Options{Output: "yaml", MetalLBNamespace: "metallb-system"}
	cmd := &cobra.Command{
		Use:     system,
		Short:   short,
		Args:    cobra.NoArgs,
		Example: fmt.Sprintf("  mooring import %[1]s -f %[1]s-config/ > mooring.yaml\n  mooring import %[1]s --from-cluster --report report.txt -o json", system),
		PreRunE: func(*cobra.Command, []string) error {
			switch {
			case o.FromCluster && len(o.Files) > 0:
				return errors.New("use either --from-cluster or -f, not both")
			case !o.FromCluster && len(o.Files) == 0:
				return errors.New("nothing to import: give -f FILE|DIR (repeatable) or --from-cluster")
			case o.Output != "yaml" && o.Output != "json":
				return fmt.Errorf("-o %q: use yaml or json", o.Output)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			var inputs []importer.Input
			var err error
			switch {
			case o.FromCluster:
				inputs, err = fromCluster(cmd.Context(), o, system)
			default:
				inputs, err = ReadFiles(o.Files)
			}
			if err != nil {
				return err
			}
			return Run(o, inputs, imp, deps.Streams.Out, deps.Streams.Err)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.Files, "filename", "f", nil, "file or directory (.yaml, .yml, .json) to import; repeatable")
	f.BoolVar(&o.FromCluster, "from-cluster", false, "read the configuration from the cluster (read-only)")
	cliutil.AddKubeconfigFlag(cmd, &o.Kubeconfig)
	f.StringVarP(&o.Output, "output", "o", o.Output, "output format: yaml or json")
	f.StringVar(&o.ReportFile, "report", "", "write the report to this file instead of stderr (JSON when it ends in .json)")
	if system == "metallb" {
		f.StringVar(&o.MetalLBNamespace, "metallb-namespace", o.MetalLBNamespace, "namespace of MetalLB's pre-0.13 ConfigMap \"config\" (--from-cluster)")
	}
	return cmd
}

// Run imports inputs, prints the objects to out and the report to errOut
// (or o.ReportFile).
func Run(o Options, inputs []importer.Input, imp func([]importer.Input) (*importer.Result, error), out, errOut io.Writer) error {
	if o.Output != "yaml" && o.Output != "json" {
		return fmt.Errorf("-o %q: use yaml or json", o.Output)
	}
	res, err := imp(inputs)
	if err != nil {
		return err
	}
	if err := printObjects(out, o.Output, res.Objects()); err != nil {
		return err
	}
	if o.ReportFile == "" {
		return res.Report.WriteText(errOut)
	}
	var buf strings.Builder
	if strings.HasSuffix(o.ReportFile, ".json") {
		b, err := json.MarshalIndent(res.Report, "", "  ")
		if err != nil {
			return err
		}
		buf.Write(append(b, '\n'))
	} else if err := res.Report.WriteText(&buf); err != nil {
		return err
	}
	if err := os.WriteFile(o.ReportFile, []byte(buf.String()), 0o644); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	fmt.Fprintf(errOut, "report: %d mapped, %d changed in meaning, %d not mapped; written to %s\n",
		res.Report.Count(importer.Mapped), res.Report.Count(importer.Changed), res.Report.Count(importer.NotMapped), o.ReportFile)
	return nil
}

func printObjects(w io.Writer, format string, objs []any) error {
	if format == "json" {
		b, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": objs}, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	var b strings.Builder
	for i, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ReadFiles reads files and, for directories, every .yaml, .yml and .json
// file below them, in lexical order.
func ReadFiles(paths []string) ([]importer.Input, error) {
	var out []importer.Input
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			out = append(out, importer.Input{Name: p, Data: b})
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if !slices.Contains([]string{".yaml", ".yml", ".json"}, strings.ToLower(filepath.Ext(path))) {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out = append(out, importer.Input{Name: path, Data: b})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Resources are what --from-cluster lists for each system.
var Resources = map[string][]schema.GroupVersionResource{
	"metallb": {
		{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"},
		{Group: "metallb.io", Version: "v1beta1", Resource: "addresspools"},
		{Group: "metallb.io", Version: "v1beta1", Resource: "l2advertisements"},
		{Group: "metallb.io", Version: "v1beta1", Resource: "bgpadvertisements"},
		{Group: "metallb.io", Version: "v1beta2", Resource: "bgppeers"},
		{Group: "metallb.io", Version: "v1beta1", Resource: "bgppeers"}, // MetalLB before v1beta2
		{Group: "metallb.io", Version: "v1beta1", Resource: "bfdprofiles"},
		{Group: "metallb.io", Version: "v1beta1", Resource: "communities"},
	},
	"cilium": {
		{Group: "cilium.io", Version: "v2", Resource: "ciliumloadbalancerippools"},
		{Group: "cilium.io", Version: "v2alpha1", Resource: "ciliumloadbalancerippools"},
		{Group: "cilium.io", Version: "v2alpha1", Resource: "ciliuml2announcementpolicies"},
	},
}

func fromCluster(ctx context.Context, o Options, system string) ([]importer.Input, error) {
	cfg, err := kube.RESTConfig(o.Kubeconfig, 20, 40)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return ReadCluster(ctx, dc, system, o.MetalLBNamespace)
}

// ReadCluster lists the system's objects, read-only. A resource the cluster
// does not serve is skipped (an older or newer version of the system);
// every object is one Input named cluster:<resource>/<namespace>/<name>.
func ReadCluster(ctx context.Context, dc dynamic.Interface, system, metallbNS string) ([]importer.Input, error) {
	var out []importer.Input
	seen := map[string]bool{} // an object served at two versions is one object
	for _, gvr := range Resources[system] {
		list, err := dc.Resource(gvr).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
		}
		for _, it := range list.Items {
			key := gvr.Resource + "/" + it.GetNamespace() + "/" + it.GetName()
			if seen[key] {
				continue
			}
			seen[key] = true
			b, err := json.Marshal(it.Object)
			if err != nil {
				return nil, err
			}
			out = append(out, importer.Input{Name: "cluster:" + key, Data: b})
		}
	}
	if system == "metallb" {
		cm, err := dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(metallbNS).Get(ctx, "config", metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("reading ConfigMap %s/config: %w", metallbNS, err)
		default:
			b, err := json.Marshal(cm.Object)
			if err != nil {
				return nil, err
			}
			out = append(out, importer.Input{Name: "cluster:configmaps/" + metallbNS + "/config", Data: b})
		}
	}
	return out, nil
}
