package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const genOutput = `---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: mooring-agent-pod-ipam
rules:
- apiGroups:
  - mooring.dev
  resources:
  - podipamnodes
  verbs:
  - create
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: mooring-agent-pod-ipam
  namespace: mooring-system
rules:
- apiGroups:
  - ""
  resources:
  - configmaps
  verbs:
  - get
`

const genController = `---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: mooring-controller
rules:
- apiGroups:
  - ""
  resources:
  - services/status
  verbs:
  - patch
`

// Each role goes to its own folder, ClusterRole then Role, byte for byte
// as controller-gen wrote them; a role no marker names any more loses its
// role.yaml.
func TestSplitRoles(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, configRBAC, "podipam", "role.yaml")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte(genController), 0o644); err != nil {
		t.Fatal(err)
	}
	removed, changed, err := SplitRoles(dir, []byte(genOutput+genController))
	if err != nil || !changed || len(removed) != 1 || removed[0] != filepath.Join(configRBAC, "podipam", "role.yaml") {
		t.Fatalf("SplitRoles: removed %v, changed %v, err %v", removed, changed, err)
	}
	got, err := os.ReadFile(filepath.Join(dir, configRBAC, "agent-pod-ipam", "role.yaml"))
	if err != nil || string(got) != genOutput {
		t.Errorf("agent-pod-ipam/role.yaml:\n%s\nwant\n%s (%v)", got, genOutput, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, configRBAC, "controller", "role.yaml")); string(got) != genController {
		t.Errorf("controller/role.yaml:\n%s", got)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale podipam/role.yaml is still there (%v)", err)
	}
	if roles, _ := GeneratedRoles(dir); strings.Join(roles, " ") != "agent-pod-ipam controller" {
		t.Errorf("GeneratedRoles %v", roles)
	}
	if _, changed, err := SplitRoles(dir, []byte(genController+genOutput)); changed || err != nil {
		t.Errorf("the same roles again: changed %v, err %v", changed, err)
	}
}

// A marker that names no role, a role outside the prefix, or one role from
// two runs is refused, naming the fix.
func TestParseRolesRefuses(t *testing.T) {
	for name, c := range map[string]struct{ in, want string }{
		"unnamed":  {strings.ReplaceAll(genController, "mooring-controller", Unnamed), "roleName=mooring-"},
		"prefix":   {strings.ReplaceAll(genController, "mooring-controller", "controller"), `start with "mooring-"`},
		"twice":    {genController + genController, "generated twice"},
		"empty":    {"", "no role"},
		"not role": {strings.ReplaceAll(genController, "kind: ClusterRole", "kind: ConfigMap"), "want ClusterRole or Role"},
	} {
		if _, err := ParseRoles([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one saying %q", name, err, c.want)
		}
	}
}
