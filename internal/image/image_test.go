package image

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

var testCreated = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// fakeSpec is a Spec with small stand-in binaries (no compiler involved).
func fakeSpec(t *testing.T) Spec {
	t.Helper()
	dir := t.TempDir()
	s := Spec{Version: "v1.2.3", Revision: "abc", Created: testCreated, CACerts: []byte("-----BEGIN CERTIFICATE-----\n"),
		Binaries: map[Platform]string{}, IPAMPlugins: map[Platform]string{}}
	for _, p := range DefaultPlatforms {
		f := filepath.Join(dir, p.Arch)
		if err := os.WriteFile(f, []byte("binary for "+p.String()), 0o755); err != nil {
			t.Fatal(err)
		}
		s.Binaries[p] = f
		g := filepath.Join(dir, p.Arch+"-ipam")
		if err := os.WriteFile(g, []byte("plugin for "+p.String()), 0o755); err != nil {
			t.Fatal(err)
		}
		s.IPAMPlugins[p] = g
	}
	return s
}

func digest(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The same inputs give the same digest; any input change gives another.
func TestIndexIsReproducible(t *testing.T) {
	s := fakeSpec(t)
	a, err := Index(s)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Index(s)
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, a) != digest(t, b) {
		t.Fatalf("same spec, digests %s and %s", digest(t, a), digest(t, b))
	}
	later := s
	later.Created = testCreated.Add(time.Second)
	c, err := Index(later)
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, c) == digest(t, a) {
		t.Error("a different timestamp must change the digest")
	}
}

// Both platforms, the entrypoint, the non-root user, and the files.
func TestIndexContents(t *testing.T) {
	idx, err := Index(fakeSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var plats []string
	for _, d := range im.Manifests {
		plats = append(plats, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != d.Platform.Architecture || cf.OS != "linux" {
			t.Errorf("%s: config says %s/%s", d.Platform, cf.OS, cf.Architecture)
		}
		if !reflect.DeepEqual(cf.Config.Entrypoint, []string{"/mooring"}) || cf.Config.User != "65532:65532" {
			t.Errorf("%s: entrypoint %v user %q", d.Platform, cf.Config.Entrypoint, cf.Config.User)
		}
		if !cf.Created.Time.Equal(testCreated) || cf.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" {
			t.Errorf("%s: created %s labels %v", d.Platform, cf.Created, cf.Config.Labels)
		}
		files := fileTree(t, img)
		want := []string{"etc/", "etc/group", "etc/passwd", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt",
			"home/", "home/nonroot/", "mooring", "mooring-ipam", "tmp/"}
		var got []string
		for name := range files {
			got = append(got, name)
		}
		sort.Strings(got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: files %v, want %v", d.Platform, got, want)
		}
		if !strings.Contains(files["etc/passwd"], "nonroot:x:65532:65532:") {
			t.Errorf("/etc/passwd lacks the non-root user: %q", files["etc/passwd"])
		}
		if files["mooring"] != "binary for linux/"+d.Platform.Architecture {
			t.Errorf("%s: /mooring is %q", d.Platform, files["mooring"])
		}
		if files["mooring-ipam"] != "plugin for linux/"+d.Platform.Architecture {
			t.Errorf("%s: /mooring-ipam is %q", d.Platform, files["mooring-ipam"])
		}
	}
	sort.Strings(plats)
	if !reflect.DeepEqual(plats, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms %v", plats)
	}
}

// fileTree reads every layer: path -> content, checking the tar headers
// are fixed (mtime, owner) and sorted within each layer.
func fileTree(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		prev := ""
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Name < prev {
				t.Errorf("tar entries not sorted: %s after %s", h.Name, prev)
			}
			prev = h.Name
			if !h.ModTime.Equal(testCreated) {
				t.Errorf("%s: mtime %s", h.Name, h.ModTime)
			}
			if h.Uid != 0 && h.Name != "home/nonroot/" {
				t.Errorf("%s: uid %d", h.Name, h.Uid)
			}
			b, _ := io.ReadAll(tr)
			files[h.Name] = string(b)
		}
		rc.Close()
	}
	return files
}

// The layout and the archive round-trip, and the archive is byte-identical
// when written twice.
func TestLayoutAndArchive(t *testing.T) {
	idx, err := Index(fakeSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var sums []string
	for range 2 {
		lay := filepath.Join(dir, "oci")
		if err := WriteLayout(lay, idx, "v1.2.3"); err != nil {
			t.Fatal(err)
		}
		back, err := ReadLayout(lay)
		if err != nil {
			t.Fatal(err)
		}
		if digest(t, back) != digest(t, idx) {
			t.Fatalf("layout holds %s, wrote %s", digest(t, back), digest(t, idx))
		}
		arc := filepath.Join(dir, "a.tar")
		if err := WriteArchive(arc, lay, testCreated); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(arc)
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, string(b))
	}
	if sums[0] != sums[1] {
		t.Error("the archive differs between two writes")
	}
}

// An image without the CNI plugin would leave pod IPAM nodes without it:
// Index refuses a platform that lacks one.
func TestIndexNeedsThePlugin(t *testing.T) {
	s := fakeSpec(t)
	delete(s.IPAMPlugins, Platform{"linux", "arm64"})
	if _, err := Index(s); err == nil || !strings.Contains(err.Error(), "mooring-ipam") {
		t.Errorf("a spec without linux/arm64's mooring-ipam: %v, want an error naming it", err)
	}
}

func TestParsePlatform(t *testing.T) {
	if p, err := ParsePlatform("linux/arm64"); err != nil || p != (Platform{"linux", "arm64"}) {
		t.Errorf("linux/arm64: %v %v", p, err)
	}
	for _, bad := range []string{"", "linux", "/arm64", "linux/", "linux/arm/v7"} {
		if _, err := ParsePlatform(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
