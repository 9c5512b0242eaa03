// Command image builds and pushes Mooring's OCI image (make image, make
// push). The work is done by internal/image; this only reads flags.
//
//	go run ./hack/image build --version v0.1.0 --out dist   # prints the archive path last
//	go run ./hack/image push --layout dist/oci --image registry/repo:tag
//	go run ./hack/image lab --version v0.1.0 --out dist/lab # the lab's echo and pause images
//	go run ./hack/image tool --name speaker --binary bin/speaker --version v0.16.2 --user 0:0 --out DIR
//	                                                        # an image of a binary built elsewhere (MetalLB's)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mooringlb/mooring/internal/image"
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
	if len(args) == 0 {
		return fmt.Errorf("usage: image build|push|lab|tool [flags]")
	}
	switch args[0] {
	case "build":
		return build(ctx, args[1:])
	case "push":
		return push(ctx, args[1:])
	case "lab":
		return lab(ctx, args[1:])
	case "tool":
		return tool(args[1:])
	}
	return fmt.Errorf("image: unknown command %q: use build, push, lab or tool", args[0])
}

func build(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	o := image.Options{Dir: ".", Log: os.Stderr}
	fs.StringVar(&o.Out, "out", "dist", "output folder")
	fs.StringVar(&o.Version, "version", "", "version to stamp (required)")
	fs.StringVar(&o.CACerts, "ca-certs", image.DefaultCACerts, "CA bundle to copy into the image")
	plats := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch list")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := fillPlatformsAndDate(ctx, &o, *plats); err != nil {
		return err
	}
	start := time.Now()
	res, err := image.Build(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "image: index %s (%s, created %s) in %s\n", res.Digest, *plats,
		o.Created.Format(time.RFC3339), time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(os.Stderr, "image: OCI layout %s\n", res.Layout)
	fmt.Println(res.Archive)
	return nil
}

func push(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	dir := fs.String("layout", "dist/oci", "OCI layout written by make image")
	ref := fs.String("image", "", "destination, registry/repository:tag (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ref == "" {
		return fmt.Errorf("push: --image (make push IMAGE=registry/repo:tag) is required")
	}
	idx, err := image.ReadLayout(*dir)
	if err != nil {
		return err
	}
	d, err := image.Push(ctx, idx, *ref)
	if err != nil {
		return err
	}
	fmt.Println(d.String())
	return nil
}

// lab builds the images the lab's real nodes import besides Mooring's
// (docs/lab.md): echo (the demo backends) and pause (the pod sandbox), for
// this machine's platform unless --platforms says otherwise. It prints the
// output folder last.
func lab(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("lab", flag.ContinueOnError)
	o := image.Options{Dir: ".", Log: os.Stderr}
	fs.StringVar(&o.Out, "out", "dist/lab", "output folder")
	fs.StringVar(&o.Version, "version", "", "version to stamp (required)")
	plats := fs.String("platforms", image.HostPlatform().String(), "comma-separated os/arch list")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := fillPlatformsAndDate(ctx, &o, *plats); err != nil {
		return err
	}
	for _, t := range []struct{ name, pkg string }{{"echo", "./hack/labimages/echo"}, {"pause", "./hack/labimages/pause"}} {
		start := time.Now()
		res, err := image.BuildTool(ctx, image.ToolOptions{Options: o, Name: t.name, Package: t.pkg})
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "image: %s %s in %s\n", res.Archive, res.Digest, time.Since(start).Round(time.Millisecond))
	}
	fmt.Println(o.Out)
	return nil
}

// fillPlatformsAndDate sets o's platforms from a comma-separated os/arch
// list and its creation time from the source tree (reproducible builds).
func fillPlatformsAndDate(ctx context.Context, o *image.Options, plats string) error {
	for _, s := range strings.Split(plats, ",") {
		p, err := image.ParsePlatform(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		o.Platforms = append(o.Platforms, p)
	}
	created, err := image.SourceDate(ctx, o.Dir)
	if err != nil {
		return err
	}
	o.Created = created
	return nil
}

// tool wraps one static binary built elsewhere (hack/metallb builds
// MetalLB's controller and speaker) into a tool image for this machine's
// platform: /<name> as the entrypoint, tagged --version, created at the
// binary's modification time. It prints the archive last.
func tool(args []string) error {
	fs := flag.NewFlagSet("tool", flag.ContinueOnError)
	name := fs.String("name", "", "the binary's name in the image (/NAME, the entrypoint; required)")
	bin := fs.String("binary", "", "the static binary (required)")
	version := fs.String("version", "", "the image's tag (required)")
	user := fs.String("user", "", "uid:gid the image runs as (default the non-root 65532)")
	out := fs.String("out", "dist", "output folder")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" || *bin == "" || *version == "" {
		return fmt.Errorf("tool: --name, --binary and --version are required")
	}
	st, err := os.Stat(*bin)
	if err != nil {
		return fmt.Errorf("tool: %w", err)
	}
	spec := image.ToolSpec{Name: *name, Version: *version, Created: st.ModTime().UTC().Truncate(time.Second), User: *user,
		Binaries: map[image.Platform]string{image.HostPlatform(): *bin}}
	start := time.Now()
	res, err := image.WriteTool(spec, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "image: %s %s in %s\n", res.Archive, res.Digest, time.Since(start).Round(time.Millisecond))
	fmt.Println(res.Archive)
	return nil
}
