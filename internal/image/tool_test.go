package image

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestToolIndex: a tool image is /<name> (0755, the entrypoint) and /tmp,
// run as the non-root user, per platform, reproducibly.
func TestToolIndex(t *testing.T) {
	dir := t.TempDir()
	s := ToolSpec{Name: "echo", Version: "v1", Created: testCreated, Binaries: map[Platform]string{}}
	for _, p := range DefaultPlatforms {
		f := filepath.Join(dir, p.Arch)
		if err := os.WriteFile(f, []byte("echo for "+p.String()), 0o755); err != nil {
			t.Fatal(err)
		}
		s.Binaries[p] = f
	}
	a, err := ToolIndex(s)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ToolIndex(s)
	if digest(t, a) != digest(t, b) {
		t.Error("the same spec gave two digests")
	}
	m, err := a.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != len(DefaultPlatforms) {
		t.Fatalf("%d manifests, want %d", len(m.Manifests), len(DefaultPlatforms))
	}
	for _, d := range m.Manifests {
		img, err := a.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.Entrypoint[0] != "/echo" || cf.Config.User != "65532:65532" || cf.Architecture != d.Platform.Architecture {
			t.Errorf("%s: config %+v", d.Platform.Architecture, cf.Config)
		}
		layers, _ := img.Layers()
		if len(layers) != 1 {
			t.Fatalf("%d layers, want 1", len(layers))
		}
		rc, _ := layers[0].Uncompressed()
		tr := tar.NewReader(rc)
		got := map[string]int64{}
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got[h.Name] = h.Mode
			if h.Name == "echo" {
				body, _ := io.ReadAll(tr)
				if string(body) != "echo for linux/"+d.Platform.Architecture {
					t.Errorf("binary %q in the %s image", body, d.Platform.Architecture)
				}
			}
		}
		rc.Close()
		if got["echo"] != 0o755 || got["tmp/"] != 0o1777 || len(got) != 2 {
			t.Errorf("layer holds %v", got)
		}
	}
	if _, err := ToolIndex(ToolSpec{Name: "x"}); err == nil {
		t.Error("a tool image without binaries was built")
	}
	// A spec's user (MetalLB's speaker runs as root, as its own image).
	s.User = "0:0"
	root, err := ToolIndex(s)
	if err != nil {
		t.Fatal(err)
	}
	rm, _ := root.IndexManifest()
	img, _ := root.Image(rm.Manifests[0].Digest)
	if cf, err := img.ConfigFile(); err != nil || cf.Config.User != "0:0" {
		t.Errorf("User 0:0: config %+v, %v", cf, err)
	}
}
