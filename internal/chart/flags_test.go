package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/mooringlb/mooring/internal/cli"
)

// intendedDefaults are the values whose chart default differs from the
// binary's on purpose.
var intendedDefaults = map[string]string{
	"controller.leaseNamespace": "", // the release namespace
	"controller.logFormat":      "json",
	"agent.logFormat":           "json",
	"agent.gossipBindAddress":   "$(HOST_IP)",             // status.hostIP
	"agent.gossipKeyFile":       "",                       // set from agent.gossipKey
	"agent.podIpamNamespace":    "",                       // the controller's lease namespace, where it records the mode
	"agent.bgpSecretNamespace":  "",                       // the release namespace
	"agent.stateDir":            "/var/lib/mooring/agent", // a hostPath; the binary keeps no snapshot by default
	// The chart binds the role eviction needs (pods/status, bounded by
	// two admission policies) with the flag; a bare binary may not have it.
	"agent.fastEndpointEviction": "true",
}

// flagsOf lists every flag of `mooring <component>`, inherited ones (the
// root's --log-level, --log-format) included, help and deprecated aliases
// excluded.
func flagsOf(t *testing.T, component string) (*cobra.Command, []*pflag.Flag) {
	t.Helper()
	rootCmd := cli.NewRootCommand(cli.Streams{})
	sub, _, err := rootCmd.Find([]string{component})
	if err != nil || sub == rootCmd {
		t.Fatalf("no `mooring %s` command: %v", component, err)
	}
	var flags []*pflag.Flag
	seen := map[string]bool{}
	add := func(f *pflag.Flag) {
		if f.Name != "help" && f.Deprecated == "" && !seen[f.Name] {
			seen[f.Name] = true
			flags = append(flags, f)
		}
	}
	sub.LocalFlags().VisitAll(add)
	sub.InheritedFlags().VisitAll(add)
	sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
	return sub, flags
}

// camel turns a flag name into its value key: kube-api-qps -> kubeApiQps.
func camel(flag string) string {
	parts := strings.Split(flag, "-")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

func loadValues(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), ValuesFile))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func loadSchema(t *testing.T) *schemaNode {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), SchemaFile))
	if err != nil {
		t.Fatal(err)
	}
	var s schemaNode
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// schemaType is the JSON Schema type a pflag type must have ("duration": a
// string with the duration pattern).
var schemaType = map[string]string{
	"bool": "boolean", "int": "integer", "int32": "integer", "int64": "integer", "uint16": "integer",
	"float32": "number", "float64": "number", "duration": "duration", "string": "string", "stringSlice": "array",
}

// Every flag of both components has a value in values.yaml and in the
// schema, of the right type, with the binary's default (or an intended
// one); and every value names a real flag. A flag added to the binary
// without a value fails here.
func TestEveryFlagHasAValue(t *testing.T) {
	values, schema := loadValues(t), loadSchema(t)
	for _, component := range Components {
		t.Run(component, func(t *testing.T) {
			_, flags := flagsOf(t, component)
			vals, _ := values[component].(map[string]any)["flags"].(map[string]any)
			props := schema.Properties[component].Properties["flags"].Properties
			known := map[string]bool{}
			for _, f := range flags {
				key := camel(f.Name)
				known[key] = true
				where := component + ".flags." + key
				v, ok := vals[key]
				if !ok {
					t.Errorf("--%s of `mooring %s` has no value %s in %s", f.Name, component, where, ValuesFile)
					continue
				}
				p := props[key]
				if p == nil {
					t.Errorf("--%s: %s is not in %s", f.Name, where, SchemaFile)
					continue
				}
				if want := schemaType[f.Value.Type()]; want == "" || typeOf(p) != want {
					t.Errorf("--%s is a %s: %s has schema type %q, want %q", f.Name, f.Value.Type(), where, typeOf(p), want)
				}
				if !strings.Contains(p.Description, "--"+f.Name) {
					t.Errorf("%s: the schema description should name --%s", where, f.Name)
				}
				want := f.DefValue
				if d, ok := intendedDefaults[component+"."+key]; ok {
					want = d
				}
				if !sameValue(f.Value.Type(), v, want) {
					t.Errorf("%s = %v in %s, but --%s defaults to %q", where, v, ValuesFile, f.Name, want)
				}
			}
			for key := range vals {
				if !known[key] {
					t.Errorf("%s.flags.%s names no flag of `mooring %s`", component, key, component)
				}
			}
			for key := range props {
				if !known[key] {
					t.Errorf("schema %s.flags.%s names no flag of `mooring %s`", component, key, component)
				}
			}
		})
	}
}

func sameValue(typ string, v any, def string) bool {
	switch typ {
	case "duration":
		s, _ := v.(string)
		a, err1 := time.ParseDuration(s)
		b, err2 := time.ParseDuration(def)
		return err1 == nil && err2 == nil && a == b
	case "int", "int32", "int64", "uint16", "float32", "float64":
		f, ok := v.(float64)
		d, err := strconv.ParseFloat(def, 64)
		return ok && err == nil && float32(f) == float32(d)
	case "stringSlice":
		l, ok := v.([]any)
		parts := make([]string, len(l))
		for i, e := range l {
			parts[i], _ = e.(string)
		}
		return ok && "["+strings.Join(parts, ",")+"]" == def
	case "bool":
		b, ok := v.(bool)
		return ok && strconv.FormatBool(b) == def
	}
	s, ok := v.(string)
	return ok && s == def
}

// The rendered Deployment and DaemonSet pass only flags the binary knows,
// with values it accepts, and every non-empty value becomes a flag.
func TestRenderedArgsParse(t *testing.T) {
	values := loadValues(t)
	for _, vs := range valueSets(t) {
		t.Run(filepath.Base(vs), func(t *testing.T) {
			objs := render(t, "-f", vs)
			for _, o := range append(ofKind(objs, "Deployment"), ofKind(objs, "DaemonSet")...) {
				args, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				c := args[0].(map[string]any)
				var argv []string
				for _, a := range c["args"].([]any) {
					argv = append(argv, a.(string))
				}
				component := argv[0]
				sub, flags := flagsOf(t, component)
				if err := sub.ParseFlags(argv[1:]); err != nil {
					t.Fatalf("%s %s: `mooring %s` refuses the rendered args %q: %v", o.GetKind(), o.GetName(), component, argv, err)
				}
				set := map[string]bool{}
				sub.Flags().Visit(func(f *pflag.Flag) { set[f.Name] = true })
				defaults := values[component].(map[string]any)["flags"].(map[string]any)
				for _, f := range flags {
					if !set[f.Name] && !empty(defaults[camel(f.Name)]) {
						t.Errorf("%s: --%s is not passed (a value that is set must reach the binary)", o.GetName(), f.Name)
					}
				}
			}
		})
	}
}

// empty says whether a value leaves its flag out: "" or an empty list.
func empty(v any) bool {
	switch v := v.(type) {
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	}
	return v == nil
}
