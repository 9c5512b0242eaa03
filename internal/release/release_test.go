package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseVersion(t *testing.T) {
	for v, want := range map[string]string{"v0.2.0": "0.2.0", "v1.10.3": "1.10.3", "v0.2.0-rc.1": "0.2.0-rc.1"} {
		if got, err := ParseVersion(v); err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %q, %v; want %q", v, got, err, want)
		}
	}
	for _, v := range []string{"", "0.2.0", "v0.2", "v01.2.3", "v0.2.0+build", "latest", "bcd7dc3"} {
		if _, err := ParseVersion(v); err == nil || !strings.Contains(err.Error(), "VERSION=v0.2.0") {
			t.Errorf("ParseVersion(%q) = %v, want an error naming the form", v, err)
		}
	}
}

// The chart's own values.yaml: only the image's repository and digest
// change, and it stays YAML.
func TestPinValues(t *testing.T) {
	in, err := os.ReadFile("../../" + ChartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := PinValues(in, "registry.example/mooring", testDigest)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Image struct{ Repository, Digest, Tag string }
	}
	if err := yaml.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	if v.Image.Repository != "registry.example/mooring" || v.Image.Digest != testDigest {
		t.Errorf("image %+v", v.Image)
	}
	a, b := strings.Split(string(in), "\n"), strings.Split(string(out), "\n")
	diff := 0
	for i := range a {
		if i < len(b) && a[i] != b[i] {
			diff++
		}
	}
	if len(a) != len(b) || diff != 2 {
		t.Errorf("%d of %d lines changed, want 2", diff, len(a))
	}
	if _, err := PinValues([]byte("image:\n  tag: x\n"), "r", testDigest); err == nil {
		t.Error("values without repository and digest lines were accepted")
	}
}

func tgz(t *testing.T, mtime time.Time, uid int, names ...string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.ModTime, zw.Name = mtime, "x.tar"
	tw := tar.NewWriter(zw)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o600, Size: int64(len(n)), ModTime: mtime, Uid: uid, Uname: "someone"}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, n); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	zw.Close()
	return b.Bytes()
}

// An archive depends on its files alone: not on their order, times or
// owners, nor on gzip's name and time.
func TestNormalize(t *testing.T) {
	created := time.Unix(1764547200, 0)
	a, err := Normalize(tgz(t, time.Unix(1, 0), 1000, "m/Chart.yaml", "m/values.yaml"), created)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Normalize(tgz(t, time.Now(), 0, "m/values.yaml", "m/Chart.yaml"), created)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("two archives of the same files normalized differently")
	}
	c, _ := Normalize(tgz(t, time.Now(), 0, "m/values.yaml", "m/Chart.yml"), created)
	if bytes.Equal(a, c) {
		t.Fatal("different files normalized alike")
	}
}

// tool finds a cached build: $env/name, else ~/.cache/mooring/<cache>/current/name.
// Missing, it skips locally and fails under CI=true (make test builds both).
func tool(t *testing.T, env, cache, name string) string {
	t.Helper()
	dir := os.Getenv(env)
	if dir == "" {
		c, _ := os.UserCacheDir()
		dir = filepath.Join(c, "mooring", cache, "current")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		msg := name + " not found at " + p + ": run hack/" + cache + "/build.sh (or set " + env + ")"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// make release's own artefacts twice from the same commit: byte for byte
// the same; the chart carries the version, the appVersion and the pinned
// image, and renders with it; every image of the manifests is pinned.
func TestReleaseIsReproducible(t *testing.T) {
	o := Options{Root: "../..", Version: "v0.2.0", ImageRepo: "registry.example/mooring", Digest: testDigest,
		Created: time.Unix(1764547200, 0), Helm: tool(t, "MOORING_HELM", "helm", "helm"), Kubectl: tool(t, "MOORING_KUBEBIN", "kubebin", "kubectl")}
	var runs [2]map[string][]byte
	for i := range runs {
		o.Out = t.TempDir()
		a, err := Make(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = map[string][]byte{}
		for _, f := range []string{a.Chart, a.Manifests, a.Sums} {
			if runs[i][f], err = os.ReadFile(filepath.Join(o.Out, f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for f, b := range runs[0] {
		if !bytes.Equal(b, runs[1][f]) {
			t.Errorf("%s differs between two runs", f)
		}
	}
	chart := filepath.Join(t.TempDir(), "mooring-0.2.0.tgz")
	if err := os.WriteFile(chart, runs[0]["mooring-0.2.0.tgz"], 0o644); err != nil {
		t.Fatal(err)
	}
	show, err := exec.Command(o.Helm, "show", "chart", chart).Output()
	if err != nil || !strings.Contains(string(show), "\nversion: 0.2.0\n") || !strings.Contains(string(show), "appVersion: v0.2.0\n") {
		t.Errorf("helm show chart: %v\n%s", err, show)
	}
	out, err := exec.Command(o.Helm, "template", "mooring", chart, "--set", "agent.gossipKey.value=MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=").CombinedOutput()
	pinned := "registry.example/mooring@" + testDigest
	if err != nil || strings.Count(string(out), pinned) < 2 || strings.Contains(string(out), "mooring:v0.") {
		t.Errorf("helm template of the package: %v; want the Deployment's and the DaemonSet's image %s\n%s", err, pinned, out)
	}
	man := string(runs[0]["mooring-v0.2.0.yaml"])
	if strings.Count(man, pinned) < 2 || strings.Contains(man, "mooring:v0.") || !strings.Contains(man, "kind: CustomResourceDefinition") {
		t.Errorf("manifests: want every Mooring image pinned (%s) and the CRDs:\n%.2000s", pinned, man)
	}
	if !strings.Contains(string(runs[0]["SHA256SUMS"]), "  mooring-0.2.0.tgz\n") {
		t.Errorf("SHA256SUMS:\n%s", runs[0]["SHA256SUMS"])
	}
}
