// Package chart keeps the Helm chart in charts/mooring in step with what it
// is generated from: it splits controller-gen's rbac output into one role
// per component and feature (config/rbac/<role>/role.yaml, roles.go; go
// run ./hack/rbac), copies config/crd and config/rbac into the chart, and
// writes the values reference of docs/install.md from values.schema.json.
// `make generate` runs both (go run ./hack/chart after ./hack/rbac);
// its tests render the chart with helm and check it against the binary's
// flags, config/, and a real kube-apiserver.
//
// It imports nothing from k8s.io (sigs.k8s.io/yaml only); the tests do.
package chart

import (
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

// Components are the chart's components; each has a ServiceAccount and
// one or more roles (templates/rbac.yaml binds each role to one component,
// some only when a feature is on).
var Components = []string{"controller", "agent"}

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
	roles, err := GeneratedRoles(root)
	if err != nil {
		return false, err
	}
	for _, r := range roles {
		b, err := os.ReadFile(filepath.Join(root, configRBAC, r, "role.yaml"))
		if err != nil {
			return false, err
		}
		want[filepath.Join(RBACFiles, r+"-role.yaml")] = b
	}
	// CRDs and roles removed from config/ leave the chart too.
	old, _ := filepath.Glob(filepath.Join(root, CRDFiles, "*.yaml"))
	oldRoles, _ := filepath.Glob(filepath.Join(root, RBACFiles, "*-role.yaml"))
	old = append(old, oldRoles...)
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
		c, err := writeIfChanged(filepath.Join(root, n), want[n])
		if err != nil {
			return false, err
		}
		changed = changed || c
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
