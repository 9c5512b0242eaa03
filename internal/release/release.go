package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// DefaultImageRepo is where the chart and the manifests say the image is:
// what `make push IMAGE=<repo>:<version>` pushes to by default.
const DefaultImageRepo = "ghcr.io/mooringlb/mooring"

// Options say what to make and with which tools.
type Options struct {
	// Root is the repository root (charts/mooring, config/).
	Root string
	// Out is the output folder (dist).
	Out string
	// Version is the release, vMAJOR.MINOR.PATCH[-PRE] (see ParseVersion).
	Version string
	// ImageRepo and Digest name the image the artefacts pin:
	// ImageRepo@Digest (sha256:...).
	ImageRepo, Digest string
	// Created is every file time (image.SourceDate: the commit's time).
	Created time.Time
	// Helm and Kubectl are the programs (hack/helm, hack/kubebin).
	Helm, Kubectl string
}

// Artefacts are the files Make wrote, relative to Out.
type Artefacts struct {
	Chart, Manifests, Sums string
}

var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// ParseVersion checks a release version and returns the chart's version
// (the same without the "v").
func ParseVersion(v string) (string, error) {
	if !semver.MatchString(v) {
		return "", fmt.Errorf("release: VERSION %q: give a semantic version with a v, e.g. VERSION=v0.2.0 (or v0.2.0-rc.1)", v)
	}
	return strings.TrimPrefix(v, "v"), nil
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Make writes the chart package, the manifests and SHA256SUMS (which also
// lists the image archive when extra names it).
func Make(ctx context.Context, o Options, extra ...string) (Artefacts, error) {
	chartVersion, err := ParseVersion(o.Version)
	if err != nil {
		return Artefacts{}, err
	}
	if !digestRE.MatchString(o.Digest) {
		return Artefacts{}, fmt.Errorf("release: image digest %q: want sha256:<64 hex>", o.Digest)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return Artefacts{}, err
	}
	a := Artefacts{Chart: "mooring-" + chartVersion + ".tgz", Manifests: "mooring-" + o.Version + ".yaml", Sums: "SHA256SUMS"}
	chart, err := Chart(ctx, o, chartVersion)
	if err != nil {
		return Artefacts{}, err
	}
	if err := os.WriteFile(filepath.Join(o.Out, a.Chart), chart, 0o644); err != nil {
		return Artefacts{}, err
	}
	man, err := Manifests(ctx, o)
	if err != nil {
		return Artefacts{}, err
	}
	if err := os.WriteFile(filepath.Join(o.Out, a.Manifests), man, 0o644); err != nil {
		return Artefacts{}, err
	}
	sums, err := Sums(o.Out, append([]string{a.Chart, a.Manifests}, extra...))
	if err != nil {
		return Artefacts{}, err
	}
	return a, os.WriteFile(filepath.Join(o.Out, a.Sums), sums, 0o644)
}

// Sums is a SHA256SUMS file (sha256sum's format) of the named files in dir.
func Sums(dir string, names []string) ([]byte, error) {
	sort.Strings(names)
	var b bytes.Buffer
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), n)
	}
	return b.Bytes(), nil
}

// run runs a tool and returns its stdout, naming the tool on failure.
func run(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	if name == "" {
		return nil, errors.New("release: no path to a tool (helm or kubectl)")
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("release: %s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}

// Normalize rewrites a tar.gz so that it depends on its files alone:
// entries sorted by name, owner 0:0 without names, every time created,
// gzip header without name or time.
func Normalize(tgz []byte, created time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	type entry struct {
		h    *tar.Header
		data []byte
	}
	var entries []entry
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		mode := int64(0o644)
		if h.Typeflag == tar.TypeDir {
			mode = 0o755
		}
		entries = append(entries, entry{&tar.Header{Name: h.Name, Typeflag: h.Typeflag, Mode: mode, Size: int64(len(data)),
			ModTime: created.UTC()}, data})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].h.Name < entries[j].h.Name })
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := tw.WriteHeader(e.h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
