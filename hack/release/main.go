// Command release makes a release's chart package, plain manifests and
// SHA256SUMS next to the image `make image` wrote (make release). The work
// is done by internal/release; this only reads flags.
//
//	go run ./hack/release --version v0.2.0 --out dist --helm .../helm --kubectl .../kubectl
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/mooringlb/mooring/internal/image"
	"github.com/mooringlb/mooring/internal/release"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	o := release.Options{Root: "."}
	fs.StringVar(&o.Version, "version", "", "the release, vMAJOR.MINOR.PATCH (required)")
	fs.StringVar(&o.Out, "out", "dist", "output folder; the image's OCI layout is read from <out>/oci")
	fs.StringVar(&o.ImageRepo, "image-repo", release.DefaultImageRepo, "the repository the image is pushed to (make push IMAGE=<repo>:<version>)")
	fs.StringVar(&o.Helm, "helm", "", "helm (hack/helm/build.sh)")
	fs.StringVar(&o.Kubectl, "kubectl", "", "kubectl (hack/kubebin/build.sh)")
	allowDirty := fs.Bool("allow-dirty", false, "make the artefacts from a work tree with uncommitted changes (not a release)")
	check := fs.Bool("check", false, "only check the version and the work tree (make release runs it before building the image)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, err := release.ParseVersion(o.Version); err != nil {
		return err
	}
	if !*allowDirty {
		st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output()
		if err != nil || len(strings.TrimSpace(string(st))) > 0 {
			return fmt.Errorf("release: the work tree has uncommitted changes (or is not a git checkout): a release is made from a commit; commit or stash them\n%s", st)
		}
	}
	if *check {
		return nil
	}
	idx, err := image.ReadLayout(filepath.Join(o.Out, "oci"))
	if err != nil {
		return fmt.Errorf("release: the image's OCI layout (make image): %w", err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	o.Digest = d.String()
	if o.Created, err = image.SourceDate(ctx, o.Root); err != nil {
		return err
	}
	a, err := release.Make(ctx, o, "mooring.oci.tar")
	if err != nil {
		return err
	}
	for _, f := range []string{a.Chart, a.Manifests, a.Sums, "mooring.oci.tar"} {
		fmt.Fprintf(os.Stderr, "release: %s\n", filepath.Join(o.Out, f))
	}
	fmt.Fprintf(os.Stderr, "release: image %s@%s (push it: make push IMAGE=%s:%s)\n", o.ImageRepo, o.Digest, o.ImageRepo, o.Version)
	fmt.Println(filepath.Join(o.Out, a.Sums))
	return nil
}
