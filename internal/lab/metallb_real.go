package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// On real nodes (`--runtime=containerd --install=chart --metallb`) MetalLB
// is installed from its own manifest (config/manifests/metallb-native.yaml
// of the module hack/metallb builds), unchanged: its controller Deployment
// and speaker DaemonSet run under the real kubelets from images that
// hack/metallb/build.sh makes of the binaries it built (MetalLB's own
// images cannot be pulled here), imported under the names the manifest
// gives them. Its webhooks, certificate rotation and RBAC are MetalLB's.
// Mooring comes from the chart with the controller `--adopt-only` and the
// agents gossiping on metallbGossipPort: MetalLB's speakers take 7946
// on the nodes' own network.
const (
	metallbManifest = "manifests/metallb-native.yaml"
	// metallbRepository is where the manifest's images come from.
	metallbRepository = "quay.io/metallb/"
	// metallbGossipPort is Mooring's agents' gossip port beside MetalLB's
	// speakers (memberlist's 7946, hostNetwork) on real nodes.
	metallbGossipPort = 7947
	// metallbFieldManager owns what the lab applies from MetalLB's manifest.
	metallbFieldManager = "mooring-lab-metallb"
)

// metallbImageNames are the images of hack/metallb/build.sh (images/).
var metallbImageNames = []string{"controller", "speaker"}

// realMetalLB says whether MetalLB runs from its manifest on real nodes.
func (c *Config) realMetalLB() bool { return c.MetalLB != "" && c.realNodes() }

// validateRealMetalLB checks the MetalLB build has its manifest and images.
func validateRealMetalLB(dir string) error {
	var errs []error
	if _, err := os.Stat(filepath.Join(dir, metallbManifest)); err != nil {
		errs = append(errs, err)
	}
	for _, n := range metallbImageNames {
		if _, err := imageRef(filepath.Join(dir, "images", n+".oci.tar")); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lab: --runtime=containerd --metallb needs MetalLB's manifest and images in %q (a build of hack/metallb/build.sh from before they came?): %w: rerun `make metallb` and pass its last line (or set %s)", dir, err, EnvMetalLB)
	}
	return nil
}

// metallbImages are MetalLB's image archives, named as its manifest names
// them (the tag is the archive's: the version the manifest pins).
func metallbImages(dir string) []labImage {
	var out []labImage
	for _, n := range metallbImageNames {
		out = append(out, labImage{Archive: filepath.Join(dir, "images", n+".oci.tar"), Repository: metallbRepository + n})
	}
	return out
}

// metallbChartArgs: beside MetalLB the chart's controller only adopts
// (the state before `mooring migrate metallb run`), and the agents gossip
// on another port than MetalLB's speakers.
func metallbChartArgs(c *Config) []string {
	if !c.realMetalLB() {
		return nil
	}
	return []string{"--set", "controller.flags.adoptOnly=true", "--set", fmt.Sprintf("agent.flags.gossipPort=%d", metallbGossipPort)}
}
