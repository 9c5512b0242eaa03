package chart

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/mooringlb/mooring/internal/testenv"
)

// EnvHelm names the folder holding the helm binary; make test sets it from
// hack/helm/build.sh.
const EnvHelm = "MOORING_HELM"

// testKey is a valid gossip key (base64 of 32 bytes) for rendering.
const testKey = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="

func root(t testing.TB) string {
	t.Helper()
	r, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// helmBin finds helm: $MOORING_HELM/helm, else the newest hack/helm build.
// Missing, it skips locally and fails under CI=true (make test builds it).
func helmBin(t testing.TB) string {
	t.Helper()
	bin := helmPath()
	if _, err := os.Stat(bin); err != nil {
		msg := "helm not found at " + bin + ": run `make helm` (or set " + EnvHelm + ")"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// helmPath is where helmBin looks for helm.
func helmPath() string {
	dir := os.Getenv(EnvHelm)
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "mooring", "helm", "current")
	}
	return filepath.Join(dir, "helm")
}

// haveHelm reports whether helm is there for a test that has more to do
// without it; under CI=true its absence fails the test (helmBin).
func haveHelm(t testing.TB) bool {
	t.Helper()
	if os.Getenv("CI") == "true" {
		helmBin(t)
		return true
	}
	_, err := os.Stat(helmPath())
	return err == nil
}

// helm runs helm with its own empty config, cache and data folders.
func helm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	bin := helmBin(t)
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Dir = root(t)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), errors.New(strings.TrimSpace(stderr.String() + "\n" + err.Error()))
	}
	return out.String(), nil
}

// render runs helm template on the chart with the given extra arguments
// (-f, --set, ...) and returns the objects.
func render(t testing.TB, args ...string) []*unstructured.Unstructured {
	t.Helper()
	return renderRelease(t, "mooring", args...)
}

// renderRelease is render with another release name.
func renderRelease(t testing.TB, release string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := helm(t, append([]string{"template", release, Dir, "--namespace", "mooring-system"}, args...)...)
	if err != nil {
		t.Fatalf("helm template %v: %v", args, err)
	}
	return decode(t, out)
}

func decode(t testing.TB, manifests string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	for {
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode rendered manifests: %v", err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// find returns the rendered object of that kind and name, or fails.
func find(t testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return nil
}

func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var r []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			r = append(r, o)
		}
	}
	return r
}

// valueSets are the chart's ci/*.yaml files: every test renders each.
func valueSets(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root(t), Dir, "ci", "*-values.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("want at least 3 value sets in %s/ci, have %v (%v)", Dir, files, err)
	}
	return files
}
