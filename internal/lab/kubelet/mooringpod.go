package kubelet

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// MooringImage is the image repository whose pods the stand-in runs as the
// lab's own mooring binary (when Config.MooringImage names it): the lab
// renders the chart with it, so that nothing suggests an image is pulled.
const MooringImage = "mooring.dev/lab-mooring"

// ServiceAccountDir is where in-cluster clients read the token, ca.crt and
// namespace (k8s.io/client-go/rest.InClusterConfig).
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// imageRepository is ref without its tag or digest:
// "reg:5000/a/b:v1@sha256:..." is "reg:5000/a/b".
func imageRepository(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	slash := strings.LastIndex(ref, "/")
	if colon := strings.LastIndex(ref, ":"); colon > slash {
		ref = ref[:colon]
	}
	return ref
}

// isMooringPod says whether obj is a pod of Mooring's image that this node
// runs with its mooring binary: one container of that image, no init
// containers.
func (k *kubelet) isMooringPod(obj *corev1.Pod) bool {
	if k.cfg.MooringImage == "" || len(obj.Spec.Containers) != 1 || len(obj.Spec.InitContainers) > 0 {
		return false
	}
	return imageRepository(obj.Spec.Containers[0].Image) == k.cfg.MooringImage
}

// runnable is runnable, plus Mooring's pods when the node runs them.
func (k *kubelet) runnable(obj *corev1.Pod) (bool, string) {
	if k.isMooringPod(obj) {
		return true, ""
	}
	return runnable(obj)
}

// podArgv is the container's command line with the image's only binary
// replaced by self: the image's entrypoint is /mooring, so a container
// without a command runs `mooring <args>`, and one with a command runs
// self with the command's arguments. $(VAR) references are expanded.
func podArgv(self string, c *corev1.Container, env map[string]string) []string {
	argv := []string{self}
	if len(c.Command) > 1 {
		for _, a := range c.Command[1:] {
			argv = append(argv, expand(a, env))
		}
	}
	for _, a := range c.Args {
		argv = append(argv, expand(a, env))
	}
	return argv
}

// expand replaces $(VAR) by env's value as the kubelet does: an unknown
// reference stays as written, $$ is a literal $.
func expand(s string, env map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// podFacts are what the downward API can expose of a pod on this node.
type podFacts struct {
	pod     *corev1.Pod
	nodeIPs []netip.Addr
	podIPs  []netip.Addr
	// allocatable stands in for missing limits (as on a real node).
	allocatable corev1.ResourceList
}

// fieldRef resolves a downward-API field path.
func (f podFacts) fieldRef(path string) (string, error) {
	join := func(as []netip.Addr) string {
		s := make([]string, len(as))
		for i, a := range as {
			s[i] = a.String()
		}
		return strings.Join(s, ",")
	}
	if k, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		return f.pod.Labels[strings.TrimSuffix(k, "']")], nil
	}
	if k, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
		return f.pod.Annotations[strings.TrimSuffix(k, "']")], nil
	}
	switch path {
	case "metadata.name":
		return f.pod.Name, nil
	case "metadata.namespace":
		return f.pod.Namespace, nil
	case "metadata.uid":
		return string(f.pod.UID), nil
	case "spec.nodeName":
		return f.pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return f.pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return f.nodeIPs[0].String(), nil
	case "status.hostIPs":
		return join(f.nodeIPs), nil
	case "status.podIP":
		return f.podIPs[0].String(), nil
	case "status.podIPs":
		return join(f.podIPs), nil
	}
	return "", fmt.Errorf("fieldRef %q is not supported by the lab's kubelet", path)
}

// resourceRef resolves a resourceFieldRef of container c.
func (f podFacts) resourceRef(c *corev1.Container, r *corev1.ResourceFieldSelector) (string, error) {
	if r.ContainerName != "" && r.ContainerName != c.Name {
		i := slices.IndexFunc(f.pod.Spec.Containers, func(o corev1.Container) bool { return o.Name == r.ContainerName })
		if i < 0 {
			return "", fmt.Errorf("resourceFieldRef: no container %q", r.ContainerName)
		}
		c = &f.pod.Spec.Containers[i]
	}
	kind, name, ok := strings.Cut(r.Resource, ".")
	if !ok {
		return "", fmt.Errorf("resourceFieldRef %q is not supported", r.Resource)
	}
	list := c.Resources.Requests
	if kind == "limits" {
		list = c.Resources.Limits
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		if kind != "limits" {
			return "0", nil
		}
		if q, ok = f.allocatable[corev1.ResourceName(name)]; !ok {
			return "", fmt.Errorf("resourceFieldRef %q: no such resource", r.Resource)
		}
	}
	div := r.Divisor
	if div.IsZero() {
		div = resource.MustParse("1")
	}
	if name == string(corev1.ResourceCPU) {
		return fmt.Sprint(int64(math.Ceil(float64(q.MilliValue()) / float64(div.MilliValue())))), nil
	}
	return fmt.Sprint(int64(math.Ceil(float64(q.Value()) / float64(div.Value())))), nil
}

// lookupData reads one key of a Secret or ConfigMap (for env and volumes).
type lookupData func(ctx context.Context, kind, ns, name string) (map[string][]byte, error)

// containerEnv is the container's environment in the kubelet's order: the
// Service variables of the apiserver, envFrom, then env (each value
// expanded against what is defined before it). extra (the lab's, e.g. a
// test binary's switch) comes first, so the pod's own values win.
func containerEnv(ctx context.Context, f podFacts, c *corev1.Container, base, extra []string, get lookupData) ([]string, map[string]string, error) {
	var names []string
	vals := map[string]string{}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			names = append(names, k)
		}
		vals[k] = v
	}
	for _, kv := range append(slices.Clone(extra), base...) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			set(k, v)
		}
	}
	for _, from := range c.EnvFrom {
		kind, name, optional := "", "", false
		switch {
		case from.SecretRef != nil:
			kind, name, optional = "Secret", from.SecretRef.Name, ptrTrue(from.SecretRef.Optional)
		case from.ConfigMapRef != nil:
			kind, name, optional = "ConfigMap", from.ConfigMapRef.Name, ptrTrue(from.ConfigMapRef.Optional)
		default:
			continue
		}
		data, err := get(ctx, kind, f.pod.Namespace, name)
		if err != nil {
			if optional {
				continue
			}
			return nil, nil, fmt.Errorf("envFrom %s %s: %w", kind, name, err)
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			set(from.Prefix+k, string(data[k]))
		}
	}
	for _, e := range c.Env {
		v, err := envValue(ctx, f, c, e, vals, get)
		if err != nil {
			return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		set(e.Name, v)
	}
	env := make([]string, len(names))
	for i, k := range names {
		env[i] = k + "=" + vals[k]
	}
	return env, vals, nil
}

func envValue(ctx context.Context, f podFacts, c *corev1.Container, e corev1.EnvVar, vals map[string]string, get lookupData) (string, error) {
	from := e.ValueFrom
	switch {
	case from == nil:
		return expand(e.Value, vals), nil
	case from.FieldRef != nil:
		return f.fieldRef(from.FieldRef.FieldPath)
	case from.ResourceFieldRef != nil:
		return f.resourceRef(c, from.ResourceFieldRef)
	case from.SecretKeyRef != nil, from.ConfigMapKeyRef != nil:
		kind, name, key, optional := "Secret", "", "", false
		if s := from.SecretKeyRef; s != nil {
			name, key, optional = s.Name, s.Key, ptrTrue(s.Optional)
		} else {
			s := from.ConfigMapKeyRef
			kind, name, key, optional = "ConfigMap", s.Name, s.Key, ptrTrue(s.Optional)
		}
		data, err := get(ctx, kind, f.pod.Namespace, name)
		if err == nil {
			if v, ok := data[key]; ok {
				return string(v), nil
			}
			err = fmt.Errorf("%s %s has no key %q", kind, name, key)
		}
		if optional {
			return "", nil
		}
		return "", err
	}
	return "", fmt.Errorf("unsupported valueFrom")
}

func ptrTrue(b *bool) bool { return b != nil && *b }

// serviceEnv is what a kubelet gives every container about the apiserver's
// Service (default/kubernetes), which in-cluster clients read.
func serviceEnv(svc *corev1.Service) []string {
	if svc == nil || svc.Spec.ClusterIP == "" || len(svc.Spec.Ports) == 0 {
		return nil
	}
	ip, port := svc.Spec.ClusterIP, fmt.Sprint(svc.Spec.Ports[0].Port)
	hostPort := ip + ":" + port
	if strings.Contains(ip, ":") {
		hostPort = "[" + ip + "]:" + port
	}
	return []string{
		"KUBERNETES_SERVICE_HOST=" + ip,
		"KUBERNETES_SERVICE_PORT=" + port,
		"KUBERNETES_SERVICE_PORT_HTTPS=" + port,
		"KUBERNETES_PORT=tcp://" + hostPort,
		"KUBERNETES_PORT_" + port + "_TCP=tcp://" + hostPort,
		"KUBERNETES_PORT_" + port + "_TCP_PROTO=tcp",
		"KUBERNETES_PORT_" + port + "_TCP_PORT=" + port,
		"KUBERNETES_PORT_" + port + "_TCP_ADDR=" + ip,
	}
}

// automountToken says whether the pod gets a ServiceAccount token: the
// pod's setting, else its ServiceAccount's, else yes.
func automountToken(pod *corev1.Pod, sa *corev1.ServiceAccount) bool {
	if pod.Spec.AutomountServiceAccountToken != nil {
		return *pod.Spec.AutomountServiceAccountToken
	}
	if sa != nil && sa.AutomountServiceAccountToken != nil {
		return *sa.AutomountServiceAccountToken
	}
	return true
}

// serviceAccountName is the pod's ServiceAccount ("default" when unset).
func serviceAccountName(pod *corev1.Pod) string {
	if pod.Spec.ServiceAccountName != "" {
		return pod.Spec.ServiceAccountName
	}
	return "default"
}

// volumeFile is one file of a Secret or ConfigMap volume.
type volumeFile struct {
	Path string
	Data []byte
	Mode uint32
}

// volumeFiles lays out a Secret or ConfigMap volume: every key, or only
// the items, with their modes.
func volumeFiles(data map[string][]byte, items []corev1.KeyToPath, defaultMode *int32) ([]volumeFile, error) {
	mode := uint32(0o644)
	if defaultMode != nil {
		mode = uint32(*defaultMode)
	}
	var out []volumeFile
	if len(items) == 0 {
		for k, v := range data {
			out = append(out, volumeFile{Path: k, Data: v, Mode: mode})
		}
		slices.SortFunc(out, func(a, b volumeFile) int { return strings.Compare(a.Path, b.Path) })
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return nil, fmt.Errorf("no key %q", it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = uint32(*it.Mode)
		}
		if strings.Contains(it.Path, "..") || strings.HasPrefix(it.Path, "/") {
			return nil, fmt.Errorf("item path %q must be relative without ..", it.Path)
		}
		out = append(out, volumeFile{Path: it.Path, Data: v, Mode: m})
	}
	return out, nil
}

// Mount is one bind mount of a pod: Source (under the pod's folder on the
// host) appears at Target inside the pod's mount namespace.
type Mount struct {
	Source, Target string
	ReadOnly       bool
}

// PodRunConfig is what `mooring lab pod-run` (the supervisor of one pod of
// Mooring's image) needs. The kubelet starts it in the pod's new mount
// namespace (and network namespace unless hostNetwork) with the
// container's environment.
type PodRunConfig struct {
	// ReadyFD gets one byte once the mounts are made; GoFD gives the
	// ContainerSpec (JSON, then EOF) once the pod's network is wired: then
	// the container starts.
	ReadyFD, GoFD int
	// Scratch is an empty folder for a tmpfs holding the overlays that
	// create missing mount points without touching the host.
	Scratch string
	// OwnNetNS: the pod has a network namespace of its own (turn off IPv6
	// DAD there before any link arrives).
	OwnNetNS bool
	Workdir  string
	Binds    []Mount
	// RestartDelay is the first restart backoff (doubling, up to 10 s).
	RestartDelay time.Duration
	Log          *slog.Logger
}

// ParseBinds parses --bind / --bind-ro values (SRC=DST).
func ParseBinds(rw, ro []string) ([]Mount, error) {
	var out []Mount
	for i, list := range [][]string{rw, ro} {
		for _, s := range list {
			m, err := splitBind(s)
			if err != nil {
				return nil, err
			}
			m.ReadOnly = i == 1
			out = append(out, m)
		}
	}
	return out, nil
}

// ContainerSpec is the container the supervisor runs: its command line
// (the lab's binary first) and its whole environment.
type ContainerSpec struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
}

// splitBind parses SRC=DST.
func splitBind(s string) (Mount, error) {
	src, dst, ok := strings.Cut(s, "=")
	if !ok || !filepath.IsAbs(src) || !filepath.IsAbs(dst) {
		return Mount{}, fmt.Errorf("bind %q: want /source=/target", s)
	}
	return Mount{Source: src, Target: dst}, nil
}
