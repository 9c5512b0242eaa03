package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// A tool image is one static binary at /<name> and nothing else, run as
// NonRootUID unless its spec names another user: the lab's echo server and
// its pause (sandbox) image, and MetalLB's controller and speaker built
// from its Go module, which the lab's real nodes import instead of pulling
// from a registry (docs/lab.md).

// ToolSpec is what goes into a tool image's index.
type ToolSpec struct {
	// Name is the binary's name in the image (/Name, the entrypoint) and
	// the image's title.
	Name    string
	Version string
	Created time.Time
	// Binaries maps each platform to its static binary.
	Binaries map[Platform]string
	// User is the image's user ("uid:gid"); "" is NonRootUID. MetalLB's
	// speaker runs as root, as its own image does (it opens raw sockets
	// with NET_RAW, which a non-root process does not hold).
	User string
}

// ToolIndex assembles a tool image index: per platform one layer holding
// /Name (mode 0755) and /tmp.
func ToolIndex(s ToolSpec) (v1.ImageIndex, error) {
	if s.Name == "" || len(s.Binaries) == 0 {
		return nil, errors.New("image: a tool image needs a name and binaries")
	}
	plats := make([]Platform, 0, len(s.Binaries))
	for p := range s.Binaries {
		plats = append(plats, p)
	}
	sort.Slice(plats, func(i, j int) bool { return plats[i].String() < plats[j].String() })
	var idx v1.ImageIndex = empty.Index
	idx = mutate.IndexMediaType(idx, types.OCIImageIndex)
	ann := map[string]string{
		"org.opencontainers.image.title":   s.Name,
		"org.opencontainers.image.source":  "https://github.com/mooringlb/mooring",
		"org.opencontainers.image.version": s.Version,
		"org.opencontainers.image.created": s.Created.UTC().Format(time.RFC3339),
	}
	for _, p := range plats {
		img, err := toolImage(s, p, ann)
		if err != nil {
			return nil, fmt.Errorf("image: %s %s: %w", s.Name, p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				MediaType: types.OCIManifestSchema1,
				Platform:  &v1.Platform{OS: p.OS, Architecture: p.Arch},
			},
		})
	}
	return mutate.Annotations(idx, ann).(v1.ImageIndex), nil
}

func toolImage(s ToolSpec, p Platform, ann map[string]string) (v1.Image, error) {
	bin, err := os.ReadFile(s.Binaries[p])
	if err != nil {
		return nil, err
	}
	l, err := layer([]file{{path: s.Name, mode: 0o755, data: bin}, {path: "tmp", mode: 0o1777, dir: true}}, s.Created)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: s.Created}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: l, MediaType: types.OCILayer,
		History: v1.History{Created: created, CreatedBy: "mooring hack/image: /" + s.Name}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = p.OS, p.Arch, created
	user := s.User
	if user == "" {
		user = fmt.Sprintf("%d:%d", NonRootUID, NonRootUID)
	}
	cf.Config = v1.Config{
		Entrypoint: []string{"/" + s.Name},
		User:       user,
		WorkingDir: "/",
		Labels:     ann,
	}
	return mutate.ConfigFile(img, cf)
}

// ToolOptions configure BuildTool.
type ToolOptions struct {
	// Options gives the module root, output folder, version, timestamp,
	// platforms, go command and log (CACerts is not used).
	Options
	// Name is the image's and binary's name; Package the Go package to
	// build (e.g. ./hack/labimages/echo).
	Name, Package string
}

// BuildTool compiles Package for every platform (static, as Build does)
// and writes Out/<name>/ (OCI layout) and Out/<name>.oci.tar.
func BuildTool(ctx context.Context, o ToolOptions) (Result, error) {
	if o.Go == "" {
		o.Go = "go"
	}
	if len(o.Platforms) == 0 {
		o.Platforms = DefaultPlatforms
	}
	if o.Version == "" {
		return Result{}, errors.New("image: no version to stamp (pass --version)")
	}
	spec := ToolSpec{Name: o.Name, Version: o.Version, Created: o.Created, Binaries: map[Platform]string{}}
	for _, p := range o.Platforms {
		bin := filepath.Join(o.Out, "bin", p.OS+"-"+p.Arch, o.Name)
		if err := goBuild(ctx, o.Options, p, "", o.Package, bin); err != nil {
			return Result{}, err
		}
		spec.Binaries[p] = bin
	}
	return WriteTool(spec, o.Out)
}

// WriteTool assembles spec's index and writes it as out/<name>/ (OCI
// layout, tagged spec.Version) and out/<name>.oci.tar, for binaries built
// elsewhere (the lab's MetalLB images from hack/metallb's build).
func WriteTool(spec ToolSpec, out string) (Result, error) {
	idx, err := ToolIndex(spec)
	if err != nil {
		return Result{}, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return Result{}, err
	}
	res := Result{Index: idx, Digest: digest, Layout: filepath.Join(out, spec.Name), Archive: filepath.Join(out, spec.Name+".oci.tar")}
	if err := WriteLayout(res.Layout, idx, spec.Version); err != nil {
		return Result{}, err
	}
	if err := WriteArchive(res.Archive, res.Layout, spec.Created); err != nil {
		return Result{}, err
	}
	return res, nil
}
