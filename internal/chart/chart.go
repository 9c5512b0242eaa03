// Package chart keeps the Helm chart in charts/mooring in step with what it
// is generated from: it copies config/crd and config/rbac (controller-gen's
// output) into the chart, and writes the values reference of docs/install.md
// from values.schema.json. `make generate` runs it (go run ./hack/chart);
// its tests render the chart with helm and check it against the binary's
// flags, config/, and a real kube-apiserver.
//
// It imports nothing from k8s.io (sigs.k8s.io/yaml only); the tests do.
package chart

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Paths relative to the repository root.
const (
	Dir         = "charts/mooring"
	CRDFiles    = Dir + "/charts/crds/files"
	RBACFiles   = Dir + "/files/rbac"
	SchemaFile  = Dir + "/values.schema.json"
	ValuesFile  = Dir + "/values.yaml"
	InstallDoc  = "docs/install.md"
	configCRD   = "config/crd"
	configRBAC  = "config/rbac"
	beginMarker = "<!-- values reference: generated from charts/mooring/values.schema.json by `make generate`; do not edit -->"
	endMarker   = "<!-- end of values reference -->"
)

// Components are the chart's components, each with its role in
// config/rbac/<component>.
var Components = []string{"controller", "agent"}

// PodIPAMRole is the folder of the pod IPAM role under config/rbac, which
// both components get when pod IPAM is on.
const PodIPAMRole = "podipam"

// Sync copies the CRDs and the generated roles into the chart and rewrites
// the values reference in docs/install.md. It reports whether anything
// changed.
func Sync(root string) (changed bool, err error) {
	crds, err := filepath.Glob(filepath.Join(root, configCRD, "*.yaml"))
	if err != nil {
		return false, err
	}
	if len(crds) == 0 {
		return false, fmt.Errorf("chart: no CRDs in %s (run make generate)", configCRD)
	}
	want := map[string][]byte{}
	for _, f := range crds {
		b, err := os.ReadFile(f)
		if err != nil {
			return false, err
		}
		want[filepath.Join(CRDFiles, filepath.Base(f))] = b
	}
	for _, c := range append(Components, PodIPAMRole) {
		b, err := os.ReadFile(filepath.Join(root, configRBAC, c, "role.yaml"))
		if err != nil {
			return false, err
		}
		want[filepath.Join(RBACFiles, c+"-role.yaml")] = b
	}
	// CRDs removed from config/crd leave the chart too.
	old, _ := filepath.Glob(filepath.Join(root, CRDFiles, "*.yaml"))
	for _, f := range old {
		rel, _ := filepath.Rel(root, f)
		if _, ok := want[rel]; !ok {
			if err := os.Remove(f); err != nil {
				return false, err
			}
			changed = true
		}
	}
	schema, err := os.ReadFile(filepath.Join(root, SchemaFile))
	if err != nil {
		return false, err
	}
	values, err := os.ReadFile(filepath.Join(root, ValuesFile))
	if err != nil {
		return false, err
	}
	ref, err := ValuesReference(schema, values)
	if err != nil {
		return false, err
	}
	doc, err := os.ReadFile(filepath.Join(root, InstallDoc))
	if err != nil {
		return false, err
	}
	if want[InstallDoc], err = ReplaceReference(doc, ref); err != nil {
		return false, err
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(root, n)
		if cur, err := os.ReadFile(p); err == nil && bytes.Equal(cur, want[n]) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return false, err
		}
		if err := os.WriteFile(p, want[n], 0o644); err != nil {
			return false, err
		}
		changed = true
	}
	return changed, nil
}

// ReplaceReference puts ref between the markers of doc.
func ReplaceReference(doc []byte, ref string) ([]byte, error) {
	s := string(doc)
	i := strings.Index(s, beginMarker)
	j := strings.Index(s, endMarker)
	if i < 0 || j < i {
		return nil, errors.New("chart: " + InstallDoc + " lacks the values reference markers:\n" + beginMarker + "\n" + endMarker)
	}
	return []byte(s[:i+len(beginMarker)] + "\n" + ref + s[j:]), nil
}
