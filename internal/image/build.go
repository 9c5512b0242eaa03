package image

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// VersionVar and RevisionVar are the linker symbols `mooring version`
// prints.
const (
	VersionVar  = "github.com/mooringlb/mooring/internal/buildinfo.Version"
	RevisionVar = "github.com/mooringlb/mooring/internal/buildinfo.Revision"
)

// RefNameAnnotation names the index inside the OCI layout (its tag).
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// Options configure Build.
type Options struct {
	// Dir is the module root (where ./cmd/mooring is).
	Dir string
	// Out is the output folder: Out/oci is the OCI layout, Out/mooring.oci.tar
	// the OCI archive of it, Out/bin/<os>-<arch>/{mooring,mooring-ipam} the
	// binaries.
	Out string
	// Version is stamped into the binary (-X VersionVar) and the image.
	Version string
	// Created is every timestamp in the image (see SourceDate).
	Created time.Time
	// CACerts is the CA bundle to copy (DefaultCACerts when empty).
	CACerts string
	// Platforms to build (DefaultPlatforms when empty).
	Platforms []Platform
	// Go is the go command ("go" when empty).
	Go string
	// Log receives progress lines (nil discards).
	Log io.Writer
}

// Result says what Build wrote.
type Result struct {
	Index   v1.ImageIndex
	Digest  v1.Hash
	Layout  string
	Archive string
}

// Build compiles mooring and mooring-ipam for every platform and writes the
// OCI layout and archive. Cost: two `go build`s per platform (cached by Go's
// build cache), then gzip of each binary.
func Build(ctx context.Context, o Options) (Result, error) {
	if o.Go == "" {
		o.Go = "go"
	}
	if o.CACerts == "" {
		o.CACerts = DefaultCACerts
	}
	if len(o.Platforms) == 0 {
		o.Platforms = DefaultPlatforms
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Version == "" {
		return Result{}, fmt.Errorf("image: no version to stamp (pass --version)")
	}
	ca, err := os.ReadFile(o.CACerts)
	if err != nil {
		return Result{}, fmt.Errorf("image: CA bundle: %w (install Debian's ca-certificates, or pass --ca-certs)", err)
	}
	spec := Spec{Version: o.Version, Revision: gitRevision(ctx, o.Dir), Created: o.Created, CACerts: ca,
		Binaries: map[Platform]string{}, IPAMPlugins: map[Platform]string{}}
	for _, p := range o.Platforms {
		dir := filepath.Join(o.Out, "bin", p.OS+"-"+p.Arch)
		for _, b := range []struct {
			pkg string
			to  map[Platform]string
		}{{"./cmd/mooring", spec.Binaries}, {"./cmd/mooring-ipam", spec.IPAMPlugins}} {
			bin := filepath.Join(dir, filepath.Base(b.pkg))
			start := time.Now()
			if err := goBuild(ctx, o, p, spec.Revision, b.pkg, bin); err != nil {
				return Result{}, err
			}
			fmt.Fprintf(o.Log, "image: built %s in %s\n", bin, time.Since(start).Round(time.Millisecond))
			b.to[p] = bin
		}
	}
	idx, err := Index(spec)
	if err != nil {
		return Result{}, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return Result{}, err
	}
	res := Result{Index: idx, Digest: digest, Layout: filepath.Join(o.Out, "oci"), Archive: filepath.Join(o.Out, "mooring.oci.tar")}
	if err := WriteLayout(res.Layout, idx, o.Version); err != nil {
		return Result{}, err
	}
	if err := WriteArchive(res.Archive, res.Layout, o.Created); err != nil {
		return Result{}, err
	}
	return res, nil
}

// goBuild compiles one platform's binary of pkg (mooring and mooring-ipam
// alike: static, the same flags). No VCS stamp (-buildvcs=false):
// the binary must not depend on the work tree's git state (Go's stamp
// holds the commit time and a dirty flag); the commit alone is stamped
// with -X, so the same commit gives the same binary, and the index's
// revision label carries it too.
func goBuild(ctx context.Context, o Options, p Platform, rev, pkg, out string) error {
	ld := fmt.Sprintf("-s -w -X %s=%s", VersionVar, o.Version)
	if rev != "" {
		ld += fmt.Sprintf(" -X %s=%s", RevisionVar, rev)
	}
	cmd := exec.CommandContext(ctx, o.Go, "build", "-trimpath", "-buildvcs=false", "-ldflags", ld, "-o", out, pkg)
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("image: go build %s for %s: %w\n%s", pkg, p, err, stderr.Bytes())
	}
	return nil
}

func gitRevision(ctx context.Context, dir string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// SourceDate is the reproducible build time: $SOURCE_DATE_EPOCH when set,
// else the last commit's time in dir, else the Unix epoch.
func SourceDate(ctx context.Context, dir string) (time.Time, error) {
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", v)
		}
		return time.Unix(sec, 0).UTC(), nil
	}
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "log", "-1", "--format=%ct").Output()
	if sec, perr := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && perr == nil {
		return time.Unix(sec, 0).UTC(), nil
	}
	return time.Unix(0, 0).UTC(), nil
}

// WriteLayout replaces dir with an OCI layout whose index.json holds one
// entry: idx, named ref (podman's oci-archive:PATH picks the only one).
func WriteLayout(dir string, idx v1.ImageIndex, ref string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("image: OCI layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{RefNameAnnotation: ref})); err != nil {
		return fmt.Errorf("image: OCI layout %s: %w", dir, err)
	}
	return nil
}

// WriteArchive tars the layout in dir into path (an "oci-archive"): sorted
// entries, owner 0:0, modes 0644/0755, every mtime = created.
func WriteArchive(path, dir string, created time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, p := range names {
		if err := addToArchive(tw, dir, p, created); err != nil {
			f.Close()
			return fmt.Errorf("image: archive %s: %w", path, err)
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func addToArchive(tw *tar.Writer, dir, p string, created time.Time) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(dir, p)
	if err != nil {
		return err
	}
	h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: created.UTC(), Mode: 0o644, Typeflag: tar.TypeReg, Size: st.Size()}
	if st.IsDir() {
		h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
		return tw.WriteHeader(h)
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	src, err := os.Open(p)
	if err != nil {
		return err
	}
	defer src.Close()
	_, err = io.Copy(tw, src)
	return err
}
