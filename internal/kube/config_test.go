package kube

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeKubeconfig(t *testing.T, dir, name, server, ctx string, current bool) string {
	t.Helper()
	p := filepath.Join(dir, name)
	body := `apiVersion: v1
kind: Config
clusters: [{name: ` + ctx + `, cluster: {server: "` + server + `"}}]
users: [{name: ` + ctx + `, user: {token: t}}]
contexts: [{name: ` + ctx + `, context: {cluster: ` + ctx + `, user: ` + ctx + `}}]
`
	if current {
		body += "current-context: " + ctx + "\n"
	}
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The rule, in order: --kubeconfig, then $KUBECONFIG (a list, merged like
// kubectl), then in-cluster; never ~/.kube/config.
func TestRESTConfigRule(t *testing.T) {
	dir := t.TempDir()
	a := writeKubeconfig(t, dir, "a", "https://192.0.2.1:6443", "a", true)
	b := writeKubeconfig(t, dir, "b", "https://192.0.2.2:6443", "b", true)
	c := writeKubeconfig(t, dir, "c", "https://192.0.2.4:6443", "c", false)
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a pod
	home := t.TempDir()
	t.Setenv("HOME", home)
	if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeKubeconfig(t, filepath.Join(home, ".kube"), "config", "https://192.0.2.3:6443", "h", true)

	t.Setenv(EnvKubeconfig, a)
	cfg, err := RESTConfig(b, 7, 9)
	if err != nil || cfg.Host != "https://192.0.2.2:6443" {
		t.Fatalf("--kubeconfig should win over $KUBECONFIG: %v, %v", cfg, err)
	}

	cfg, err = RESTConfig("", 7, 9)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://192.0.2.1:6443" || cfg.QPS != 7 || cfg.Burst != 9 {
		t.Errorf("$KUBECONFIG: host %s qps %v burst %d", cfg.Host, cfg.QPS, cfg.Burst)
	}

	// A list is merged: c sets no current-context, a's applies.
	t.Setenv(EnvKubeconfig, c+string(os.PathListSeparator)+a)
	if cfg, err = RESTConfig("", 1, 1); err != nil || cfg.Host != "https://192.0.2.1:6443" {
		t.Errorf("$KUBECONFIG list: %v, %v", cfg, err)
	}

	t.Setenv(EnvKubeconfig, "")
	_, err = RESTConfig("", 1, 1)
	if !errors.Is(err, ErrNoConfig) {
		t.Fatalf("nothing set: want ErrNoConfig, got %v", err)
	}
	if !strings.Contains(err.Error(), "--kubeconfig "+filepath.Join(home, ".kube", "config")) {
		t.Errorf("the error should say how to use ~/.kube/config: %v", err)
	}

	if _, err := RESTConfig(filepath.Join(dir, "missing"), 1, 1); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing file: %v", err)
	}
}
