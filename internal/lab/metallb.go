package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/mooringlb/mooring/internal/lab/kubelet"
)

// The lab can run the real MetalLB (controller and speakers built from
// go.universe.tf/metallb by hack/metallb) beside or instead of Mooring, so
// that `mooring migrate metallb run` is shown against the real thing.
//
// There is no DaemonSet or Deployment controller and no container runtime
// in the lab, so the lab plays both for MetalLB only: it creates MetalLB's
// Deployment `controller` and DaemonSet `speaker` in metallb-system (as
// MetalLB's manifest would) and a supervisor keeps one controller process
// while the Deployment exists with replicas > 0, and one speaker process in
// every node namespace whose labels match the DaemonSet's pod nodeSelector
// while the DaemonSet exists. For each process it publishes a Pod (owned by
// the DaemonSet/Deployment, Running, podIP = the node's address), because
// MetalLB reads its own Pod and the speakers find their memberlist peers
// by listing the speaker Pods. Deleting the DaemonSet or patching its
// nodeSelector — what the migration does in a real cluster — stops the
// processes and removes their Pods within the supervisor's period.
//
// MetalLB's processes use the lab's admin kubeconfig (no ServiceAccount,
// no RBAC of MetalLB's own), and its webhooks are off
// (--webhook-mode=disabled, --disable-cert-rotation): the lab has no
// Service network path to a webhook backend.
const (
	MetalLBNamespace  = "metallb-system"
	MetalLBSpeaker    = "speaker"    // the DaemonSet
	MetalLBController = "controller" // the Deployment
	// MetalLBPool and MetalLBAdvertisement are the lab's IPAddressPool
	// (PoolRange4 and PoolRange6) and L2Advertisement.
	MetalLBPool          = "lab"
	MetalLBAdvertisement = "lab"
	// metallbMLPort is the speakers' memberlist port: Mooring's agents use
	// memberlist's default 7946 in the same node namespaces.
	metallbMLPort = 7947
	// metallbHealthPort and metallbControllerHealthPort are the processes'
	// health probe ports (loopback in their namespace; the controller shares
	// the control-plane namespace with Mooring's controller).
	metallbHealthPort           = 17472
	metallbControllerHealthPort = 17473
	metallbMLSecret             = "memberlist"
	metallbMLSecretKey          = "secretkey" // MetalLB's k8s.MLSecretKeyName
	metallbVersion              = "v0.16.2"
)

// MetalLB's labels, as its manifests set them (the speakers' memberlist
// finds its peers by them).
var (
	metallbSpeakerLabels    = map[string]string{"app": "metallb", "component": "speaker"}
	metallbControllerLabels = map[string]string{"app": "metallb", "component": "controller"}
	metallbPoolGVR          = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}
	metallbL2GVR            = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "l2advertisements"}
)

// EnvMetalLB names the folder hack/metallb/build.sh printed (controller,
// speaker, crds/).
const EnvMetalLB = "MOORING_METALLB"

// FindMetalLB returns $MOORING_METALLB, else the newest build in
// ${XDG_CACHE_HOME:-$HOME/.cache}/mooring/metallb/current; "" when neither
// holds a speaker.
func FindMetalLB() string {
	if d := os.Getenv(EnvMetalLB); d != "" {
		return d
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	d := filepath.Join(c, "mooring", "metallb", "current")
	if isExecFile(filepath.Join(d, "speaker")) {
		return d
	}
	return ""
}

// validateMetalLB checks the folder holds what the lab runs.
func validateMetalLB(dir string) error {
	for _, b := range []string{"controller", "speaker"} {
		if !isExecFile(filepath.Join(dir, b)) {
			return fmt.Errorf("lab: MetalLB's %s not found in %q: run `make metallb` and pass its last line (or set %s)", b, dir, EnvMetalLB)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "crds", "*.yaml")); len(m) == 0 {
		return fmt.Errorf("lab: no MetalLB CRDs in %q: run `make metallb`", filepath.Join(dir, "crds"))
	}
	return nil
}

// metallbSpeakerComponent runs MetalLB's speaker in node n's namespace
// with the environment MetalLB's manifest gives it.
func metallbSpeakerComponent(c *Config, p paths, n nodeSpec, secretDir string) component {
	return component{
		Name: "metallb-speaker/" + n.Name, Host: n.Name,
		Path: filepath.Join(c.MetalLB, "speaker"),
		Args: []string{
			"--port=0", // no metrics listener: it would need TokenReviews
			fmt.Sprintf("--health-probe-port=%d", metallbHealthPort),
			"--log-level=info",
		},
		Env: []string{
			"KUBECONFIG=" + p.ClusterKubecfg,
			"METALLB_NODE_NAME=" + n.Name,
			"METALLB_HOST=" + n.Addrs[0].String(),
			"METALLB_NAMESPACE=" + MetalLBNamespace,
			"METALLB_POD_NAME=" + metallbSpeakerPod(n.Name),
			"METALLB_ML_BIND_ADDR=" + n.Addrs[0].String(),
			fmt.Sprintf("METALLB_ML_BIND_PORT=%d", metallbMLPort),
			"METALLB_ML_LABELS=" + joinLabels(metallbSpeakerLabels),
			"METALLB_ML_SECRET_KEY_PATH=" + secretDir,
		},
	}
}

// metallbControllerComponent runs MetalLB's controller beside the
// apiserver; it creates the memberlist Secret the speakers read.
func metallbControllerComponent(c *Config, p paths) component {
	return component{
		Name: "metallb-controller", Host: controlPlaneHost,
		Path: filepath.Join(c.MetalLB, "controller"),
		Args: []string{
			"--port=0",
			fmt.Sprintf("--health-probe-port=%d", metallbControllerHealthPort),
			"--webhook-mode=disabled",
			"--disable-cert-rotation",
			"--log-level=info",
		},
		Env: []string{
			"KUBECONFIG=" + p.ClusterKubecfg,
			"METALLB_NAMESPACE=" + MetalLBNamespace,
			"METALLB_POD_NAME=" + metallbControllerPod,
			"METALLB_ML_SECRET_NAME=" + metallbMLSecret,
			"METALLB_DEPLOYMENT=" + MetalLBController,
		},
	}
}

func metallbSpeakerPod(node string) string { return "speaker-" + node }

const metallbControllerPod = "controller-lab"

// metallbWorkloads are MetalLB's Deployment and DaemonSet as its manifest
// has them, reduced to what the lab's supervisor reads.
func metallbWorkloads() (*appsv1.Deployment, *appsv1.DaemonSet) {
	tmpl := func(labels map[string]string, image string, hostNet bool) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{
				HostNetwork:  hostNet,
				NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
				Containers:   []corev1.Container{{Name: labels["component"], Image: image}},
			},
		}
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: MetalLBController, Namespace: MetalLBNamespace, Labels: metallbControllerLabels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: metallbControllerLabels},
			Template: tmpl(metallbControllerLabels, "quay.io/metallb/controller:"+metallbVersion, false),
		},
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: MetalLBSpeaker, Namespace: MetalLBNamespace, Labels: metallbSpeakerLabels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: metallbSpeakerLabels},
			Template: tmpl(metallbSpeakerLabels, "quay.io/metallb/speaker:"+metallbVersion, true),
		},
	}
	return dep, ds
}

// metallbConfig is the lab's IPAddressPool over the demo ranges and an
// L2Advertisement of it.
func metallbConfig() []*unstructured.Unstructured {
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
		"metadata": map[string]any{"name": MetalLBPool, "namespace": MetalLBNamespace},
		"spec": map[string]any{"addresses": []any{
			PoolRange4[0].String() + "-" + PoolRange4[1].String(),
			PoolRange6[0].String() + "-" + PoolRange6[1].String(),
		}},
	}}
	l2 := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
		"metadata": map[string]any{"name": MetalLBAdvertisement, "namespace": MetalLBNamespace},
		"spec":     map[string]any{"ipAddressPools": []any{MetalLBPool}},
	}}
	return []*unstructured.Unstructured{pool, l2}
}

// selects reports whether a pod nodeSelector admits a node's labels.
func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// metallbPod is the Pod the supervisor publishes for one of its processes.
func metallbPod(name, node string, labels map[string]string, image string, hostNet bool, owner metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: MetalLBNamespace, Labels: labels,
			// The supervisor runs and reports it: the kubelet stand-in
			// leaves it alone without an Event.
			Annotations:     map[string]string{kubelet.AnnotationRunBy: "lab-metallb-supervisor"},
			OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: corev1.PodSpec{
			NodeName:    node,
			HostNetwork: hostNet,
			// The controller's Pod has no node (its process runs beside the
			// apiserver): no scheduler may bind it.
			SchedulerName: "lab-metallb-supervisor",
			Containers:    []corev1.Container{{Name: labels["component"], Image: image}},
		},
	}
}

func ownerRef(kind, name string, uid string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr.To(true)}
}

// speakerNodeOf is the node of a speaker component name, "" for others.
func speakerNodeOf(name string) string {
	n, ok := strings.CutPrefix(name, "metallb-speaker/")
	if !ok {
		return ""
	}
	return n
}
