package chart

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// RolePrefix starts the name of every generated role; the rest of the name
// is its folder under config/rbac and its file under the chart's
// files/rbac (mooring-agent-pod-ipam: config/rbac/agent-pod-ipam/role.yaml,
// files/rbac/agent-pod-ipam-role.yaml).
const RolePrefix = "mooring-"

// Unnamed is the roleName `make generate` gives controller-gen for markers
// that name no role: SplitRoles refuses it, so that a permission never
// lands in a role by accident (every marker says whose it is).
const Unnamed = "unnamed"

// Role is one generated role: a ClusterRole, a namespaced Role, or both
// (controller-gen writes one of each kind per roleName).
type Role struct {
	// Name is the role's name without RolePrefix: "agent-pod-ipam".
	Name string
	// Docs are controller-gen's YAML documents of the role, ClusterRole
	// first, each starting with "---".
	Docs []string
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*\n`)

// ParseRoles groups controller-gen's rbac output (one or more runs
// concatenated) by role name. A marker without roleName (role Unnamed), a
// name without RolePrefix, or one kind of one role generated twice (two
// runs) is an error that names the fix.
func ParseRoles(generated []byte) ([]Role, error) {
	byName := map[string]*Role{}
	var order []string
	seen := map[string]bool{}
	for _, doc := range docSep.Split(string(generated), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var m struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Rules []map[string]any `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, fmt.Errorf("rbac: controller-gen output: %w", err)
		}
		if m.Kind != "ClusterRole" && m.Kind != "Role" {
			return nil, fmt.Errorf("rbac: controller-gen output holds a %q, want ClusterRole or Role", m.Kind)
		}
		name := m.Metadata.Name
		switch {
		case name == Unnamed:
			return nil, fmt.Errorf("rbac: a +kubebuilder:rbac marker names no role (rules %v): add roleName=%s<component> to it, e.g. roleName=mooring-agent", m.Rules, RolePrefix)
		case !strings.HasPrefix(name, RolePrefix) || len(name) == len(RolePrefix):
			return nil, fmt.Errorf("rbac: role %q: role names start with %q (roleName=%sagent)", name, RolePrefix, RolePrefix)
		case seen[m.Kind+"/"+name]:
			return nil, fmt.Errorf("rbac: %s %s is generated twice: name its markers in one controller-gen run only (Makefile, generate)", m.Kind, name)
		}
		seen[m.Kind+"/"+name] = true
		r := byName[name]
		if r == nil {
			r = &Role{Name: strings.TrimPrefix(name, RolePrefix)}
			byName[name] = r
			order = append(order, name)
		}
		doc = "---\n" + doc
		if m.Kind == "ClusterRole" {
			r.Docs = append([]string{doc}, r.Docs...)
		} else {
			r.Docs = append(r.Docs, doc)
		}
	}
	if len(order) == 0 {
		return nil, errors.New("rbac: no role in controller-gen's output (run make generate)")
	}
	slices.Sort(order)
	out := make([]Role, len(order))
	for i, n := range order {
		out[i] = *byName[n]
	}
	return out, nil
}

// SplitRoles writes each role of controller-gen's output to
// config/rbac/<name>/role.yaml and removes the role.yaml of a folder whose
// role is no longer generated (the folder's other files are the
// installer's: bindings, kustomization, admission policies). It reports
// the files it removed and whether anything changed.
func SplitRoles(root string, generated []byte) (removed []string, changed bool, err error) {
	roles, err := ParseRoles(generated)
	if err != nil {
		return nil, false, err
	}
	want := map[string][]byte{}
	for _, r := range roles {
		want[filepath.Join(configRBAC, r.Name, "role.yaml")] = []byte(strings.Join(r.Docs, ""))
	}
	old, err := filepath.Glob(filepath.Join(root, configRBAC, "*", "role.yaml"))
	if err != nil {
		return nil, false, err
	}
	for _, f := range old {
		rel, _ := filepath.Rel(root, f)
		if _, ok := want[rel]; !ok {
			if err := os.Remove(f); err != nil {
				return nil, false, err
			}
			removed = append(removed, rel)
		}
	}
	changed = len(removed) > 0
	for rel, b := range want {
		c, err := writeIfChanged(filepath.Join(root, rel), b)
		if err != nil {
			return nil, false, err
		}
		changed = changed || c
	}
	return removed, changed, nil
}

// GeneratedRoles lists the role folders under config/rbac that hold a
// generated role.yaml, sorted.
func GeneratedRoles(root string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(root, configRBAC, "*", "role.yaml"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		out = append(out, filepath.Base(filepath.Dir(f)))
	}
	slices.Sort(out)
	return out, nil
}

func writeIfChanged(p string, b []byte) (bool, error) {
	if cur, err := os.ReadFile(p); err == nil && bytes.Equal(cur, b) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return false, err
	}
	return true, os.WriteFile(p, b, 0o644)
}
