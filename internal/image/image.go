// Package image builds Mooring's container image without a Docker daemon:
// static mooring and mooring-ipam (the CNI IPAM plugin, which the agent's
// init container copies to the node) binaries per platform, CA
// certificates and a non-root user,
// assembled from scratch into an OCI image index with go-containerregistry.
// The build is reproducible: the same source, version and timestamp give the
// same index digest (fixed mtimes, sorted tar entries, fixed owners).
//
// It may import go-containerregistry; nothing from k8s.io.
package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Paths inside the image.
const (
	// Entrypoint is the binary; `<image> version` runs `/mooring version`.
	Entrypoint = "/mooring"
	// IPAMPluginPath is the CNI IPAM plugin; `mooring agent install-cni`
	// copies it onto the node (the chart's init container, pod IPAM on).
	IPAMPluginPath = "/mooring-ipam"
	// CACertsPath is where Go's crypto/x509 looks first on Linux.
	CACertsPath = "/etc/ssl/certs/ca-certificates.crt"
	// NonRootUID is the image's default user (distroless' "nonroot"). The
	// controller runs as it; the agent's DaemonSet overrides it with 0 because
	// Kubernetes grants added capabilities to a non-root user's permitted set
	// only.
	NonRootUID = 65532
)

// DefaultCACerts is the build machine's bundle (Debian's ca-certificates).
const DefaultCACerts = "/etc/ssl/certs/ca-certificates.crt"

// Platform is one OS/architecture of the index.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// DefaultPlatforms are the ones `make image` builds.
var DefaultPlatforms = []Platform{{"linux", "amd64"}, {"linux", "arm64"}}

// ParsePlatform reads "os/arch".
func ParsePlatform(s string) (Platform, error) {
	goos, arch, ok := strings.Cut(s, "/")
	if !ok || goos == "" || arch == "" || strings.Contains(arch, "/") {
		return Platform{}, fmt.Errorf("platform %q: want os/arch, e.g. linux/arm64", s)
	}
	return Platform{goos, arch}, nil
}

// Spec is what goes into the index, everything already on disk or in memory.
type Spec struct {
	// Version is stamped into labels and annotations.
	Version string
	// Revision is the VCS commit, if known (a label only).
	Revision string
	// Created is every timestamp in the image: config, history, tar mtimes.
	Created time.Time
	// CACerts is the PEM bundle copied to CACertsPath.
	CACerts []byte
	// Binaries maps each platform to its static mooring binary.
	Binaries map[Platform]string
	// IPAMPlugins maps each platform to its static mooring-ipam binary
	// (every platform of Binaries needs one).
	IPAMPlugins map[Platform]string
}

// Index assembles the multi-platform index. Each image has two layers: a
// base shared by every platform (passwd, group, CA bundle, /tmp) and the
// platform's binaries (mooring and mooring-ipam).
func Index(s Spec) (v1.ImageIndex, error) {
	if len(s.Binaries) == 0 {
		return nil, errors.New("image: no binaries to package")
	}
	if len(s.CACerts) == 0 {
		return nil, errors.New("image: empty CA bundle (install Debian's ca-certificates, or pass --ca-certs)")
	}
	base, err := layer(baseFiles(s.CACerts), s.Created)
	if err != nil {
		return nil, fmt.Errorf("image: base layer: %w", err)
	}
	plats := make([]Platform, 0, len(s.Binaries))
	for p := range s.Binaries {
		plats = append(plats, p)
	}
	sort.Slice(plats, func(i, j int) bool { return plats[i].String() < plats[j].String() })

	var idx v1.ImageIndex = empty.Index
	idx = mutate.IndexMediaType(idx, types.OCIImageIndex)
	for _, p := range plats {
		img, err := platformImage(s, p, base)
		if err != nil {
			return nil, fmt.Errorf("image: %s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				MediaType: types.OCIManifestSchema1,
				Platform:  &v1.Platform{OS: p.OS, Architecture: p.Arch},
			},
		})
	}
	return mutate.Annotations(idx, annotations(s)).(v1.ImageIndex), nil
}

func annotations(s Spec) map[string]string {
	a := map[string]string{
		"org.opencontainers.image.title":   "mooring",
		"org.opencontainers.image.source":  "https://github.com/mooringlb/mooring",
		"org.opencontainers.image.version": s.Version,
		"org.opencontainers.image.created": s.Created.UTC().Format(time.RFC3339),
	}
	if s.Revision != "" {
		a["org.opencontainers.image.revision"] = s.Revision
	}
	return a
}

func platformImage(s Spec, p Platform, base v1.Layer) (v1.Image, error) {
	bin, err := os.ReadFile(s.Binaries[p])
	if err != nil {
		return nil, err
	}
	if s.IPAMPlugins[p] == "" {
		return nil, fmt.Errorf("no mooring-ipam binary for %s", p)
	}
	plugin, err := os.ReadFile(s.IPAMPlugins[p])
	if err != nil {
		return nil, err
	}
	binLayer, err := layer([]file{
		{path: Entrypoint[1:], mode: 0o755, data: bin},
		{path: IPAMPluginPath[1:], mode: 0o755, data: plugin},
	}, s.Created)
	if err != nil {
		return nil, fmt.Errorf("binary layer: %w", err)
	}
	created := v1.Time{Time: s.Created}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: created, CreatedBy: "mooring hack/image: passwd, group, CA certificates, /tmp"}},
		mutate.Addendum{Layer: binLayer, MediaType: types.OCILayer, History: v1.History{Created: created, CreatedBy: "mooring hack/image: " + Entrypoint + ", " + IPAMPluginPath}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = p.OS, p.Arch, created
	cf.Config = v1.Config{
		Entrypoint: []string{Entrypoint},
		User:       fmt.Sprintf("%d:%d", NonRootUID, NonRootUID),
		WorkingDir: "/",
		Env:        []string{"PATH=/"},
		Labels:     annotations(s),
	}
	return mutate.ConfigFile(img, cf)
}

// file is one regular file or directory (data == nil and dir) of a layer.
type file struct {
	path string // relative, no leading slash
	mode int64
	dir  bool
	data []byte
}

func baseFiles(caCerts []byte) []file {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n" +
		fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRootUID, NonRootUID)
	group := "root:x:0:\n" + fmt.Sprintf("nonroot:x:%d:\n", NonRootUID)
	return []file{
		{path: "etc", mode: 0o755, dir: true},
		{path: "etc/group", mode: 0o644, data: []byte(group)},
		{path: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{path: "etc/ssl", mode: 0o755, dir: true},
		{path: "etc/ssl/certs", mode: 0o755, dir: true},
		{path: CACertsPath[1:], mode: 0o644, data: caCerts},
		{path: "home", mode: 0o755, dir: true},
		{path: "home/nonroot", mode: 0o700, dir: true},
		{path: "tmp", mode: 0o1777, dir: true},
	}
}

// layer writes files into a gzipped tar with sorted names, owner 0:0 (the
// nonroot home excepted) and every mtime set to created.
func layer(files []file, created time.Time) (v1.Layer, error) {
	sorted := append([]file(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].path < sorted[j].path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range sorted {
		h := &tar.Header{
			Name:    f.path,
			Mode:    f.mode,
			ModTime: created.UTC(),
		}
		if f.path == "home/nonroot" {
			h.Uid, h.Gid = NonRootUID, NonRootUID
		}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, f.path+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// HostPlatform is the platform podman would pick here.
func HostPlatform() Platform { return Platform{runtime.GOOS, runtime.GOARCH} }
