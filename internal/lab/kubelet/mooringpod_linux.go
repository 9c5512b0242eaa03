package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// startMooring runs a pod of Mooring's image with the lab's mooring binary,
// the way a container runtime would run the image: the container's
// command, args and environment (downward API included), a pod-bound
// ServiceAccount token with ca.crt and namespace at ServiceAccountDir, its
// Secret/ConfigMap/emptyDir/hostPath volumes at their mount paths, all in a mount
// namespace of its own (nothing shows on the host), and in the node's
// network namespace for hostNetwork pods, else in one of its own wired like
// the echo pods. A supervisor (`mooring lab pod-run`) holds the namespaces
// and restarts the container when it exits, as restartPolicy Always does;
// the readiness probe drives the pod's Ready condition.
//
// A deleted pod gets SIGTERM and its termination grace period (terminate).
// Not modelled: runAsUser/capabilities/readOnlyRootFilesystem (the binary
// runs as the kubelet's user), liveness probes, restart counts in the status.
func (k *kubelet) startMooring(ctx context.Context, obj *corev1.Pod) (*pod, error) {
	key := obj.Namespace + "/" + obj.Name
	c := &obj.Spec.Containers[0]
	p := &pod{key: key, uid: string(obj.UID), port: podPort(obj), started: metav1.Now()}
	hostNet := obj.Spec.HostNetwork
	if hostNet {
		p.addrs = k.cfg.NodeIPs
	}
	dir := filepath.Join(k.cfg.PodsDir, obj.Namespace+"_"+obj.Name+"_"+string(obj.UID))
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "scratch"), 0o700); err != nil {
		return nil, err
	}
	mounts, err := k.podMounts(ctx, obj, c, dir)
	if err != nil {
		return nil, fmt.Errorf("kubelet: pod %s: %w", key, err)
	}
	var svc *corev1.Service
	if s, err := k.cfg.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{}); err == nil {
		svc = s
	} else {
		return nil, fmt.Errorf("kubelet: pod %s: reading Service default/kubernetes for its environment: %w", key, err)
	}
	hostname := obj.Name
	if hostNet {
		hostname = k.cfg.NodeName
	}
	// The supervisor starts before the container's environment is known
	// (status.podIP needs the network, which needs the pod's namespace): it
	// gets the command line and environment once the pod is wired.
	sup, err := startSupervisor(k.cfg, obj, dir, mounts, c.WorkingDir)
	if err != nil {
		return nil, err
	}
	p.proc = sup.proc
	fail := func(err error) (*pod, error) {
		k.net.unwire(ctx, p)
		sup.proc.kill()
		return nil, err
	}
	if !hostNet {
		if err := k.net.wire(ctx, obj, p); err != nil {
			return fail(err)
		}
	}
	facts := podFacts{pod: obj, nodeIPs: k.cfg.NodeIPs, podIPs: p.addrs, allocatable: nodeAllocatable()}
	base := append([]string{"PATH=/", "HOSTNAME=" + hostname}, serviceEnv(svc)...)
	env, vals, err := containerEnv(ctx, facts, c, base, k.cfg.PodEnv, k.lookup)
	if err != nil {
		return fail(fmt.Errorf("kubelet: pod %s: %w", key, err))
	}
	argv := podArgv(k.cfg.Self, c, vals)
	if err := sup.run(ContainerSpec{Argv: argv, Env: env}); err != nil {
		return fail(err)
	}
	p.ready = c.ReadinessProbe == nil
	p.grace = 30 * time.Second // Kubernetes' default terminationGracePeriodSeconds
	if g := obj.Spec.TerminationGracePeriodSeconds; g != nil {
		p.grace = time.Duration(*g) * time.Second
	}
	k.mu.Lock()
	k.pods[key] = p
	k.mu.Unlock()
	k.log.Info("pod running", "pod", key, "ips", p.addrs, "pid", sup.proc.pid(), "argv", argv, "hostNetwork", hostNet)
	if c.ReadinessProbe != nil {
		pr := &prober{probe: c.ReadinessProbe, c: c, addr: p.addrs[0]}
		go pr.run(ctx, sup.proc.done, func(ready bool, why string) {
			k.mu.Lock()
			cur := k.pods[key] == p
			if cur {
				p.ready = ready
			}
			k.mu.Unlock()
			if why != "" {
				k.log.Info("readiness probe", "pod", key, "ready", ready, "detail", why)
			}
			if cur && k.requeue != nil {
				k.requeue(key)
			}
		})
	}
	go func() {
		<-sup.proc.done
		k.mu.Lock()
		cur := k.pods[key] == p
		if cur && !sup.proc.stopping.Load() {
			p.ready = false
			p.failed = "pod supervisor exited: " + sup.proc.exitErr().Error()
		}
		k.mu.Unlock()
		if cur && k.requeue != nil {
			k.requeue(key)
		}
	}()
	return p, nil
}

// terminate stops a pod gracefully, as the kubelet does on deletion:
// SIGTERM to its supervisor (which passes it to the container: the agent
// leaves gossip at once), then up to its grace period for it to exit.
func terminate(p *pod) {
	if p.grace <= 0 || p.proc.cmd == nil || p.proc.cmd.Process == nil {
		return
	}
	p.proc.stopping.Store(true)
	if err := p.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return
	}
	select {
	case <-p.proc.done:
	case <-time.After(p.grace):
	}
}

// nodeAllocatable is what limits-less resourceFieldRefs report: the
// node's allocatable (see nodeStatus).
func nodeAllocatable() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("2"),
		corev1.ResourceMemory: resource.MustParse("4Gi"),
	}
}

// lookup reads a Secret's or ConfigMap's data.
func (k *kubelet) lookup(ctx context.Context, kind, ns, name string) (map[string][]byte, error) {
	if kind == "Secret" {
		s, err := k.cfg.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return s.Data, nil
	}
	cm, err := k.cfg.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	return data, nil
}

// podMounts writes the ServiceAccount files and the volumes into dir and
// returns where they go.
func (k *kubelet) podMounts(ctx context.Context, obj *corev1.Pod, c *corev1.Container, dir string) ([]Mount, error) {
	var mounts []Mount
	saName := serviceAccountName(obj)
	sa, err := k.cfg.Client.CoreV1().ServiceAccounts(obj.Namespace).Get(ctx, saName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("ServiceAccount %s: %w", saName, err)
	}
	if automountToken(obj, sa) {
		// As the kubelet does: a token bound to the pod (the apiserver adds
		// the node's name to it), valid for the 1 h + 7 s that the
		// apiserver extends.
		tr, err := k.cfg.Client.CoreV1().ServiceAccounts(obj.Namespace).CreateToken(ctx, saName, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				ExpirationSeconds: ptr.To[int64](3607),
				BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: obj.Name, UID: obj.UID},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("requesting a token of ServiceAccount %s: %w", saName, err)
		}
		files := []volumeFile{
			{Path: "token", Data: []byte(tr.Status.Token), Mode: 0o644},
			{Path: "ca.crt", Data: k.cfg.CACert, Mode: 0o644},
			{Path: "namespace", Data: []byte(obj.Namespace), Mode: 0o644},
		}
		src := filepath.Join(dir, "serviceaccount")
		if err := writeFiles(src, files); err != nil {
			return nil, err
		}
		mounts = append(mounts, Mount{Source: src, Target: ServiceAccountDir, ReadOnly: true})
	}
	for _, vm := range c.VolumeMounts {
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			return nil, fmt.Errorf("volume mount %s: subPath is not supported by the lab's kubelet", vm.Name)
		}
		var vol *corev1.Volume
		for i := range obj.Spec.Volumes {
			if obj.Spec.Volumes[i].Name == vm.Name {
				vol = &obj.Spec.Volumes[i]
			}
		}
		if vol == nil {
			return nil, fmt.Errorf("volume mount %s: no such volume", vm.Name)
		}
		src := filepath.Join(dir, "volumes", vol.Name)
		var files []volumeFile
		switch {
		case vol.Secret != nil:
			data, err := k.lookup(ctx, "Secret", obj.Namespace, vol.Secret.SecretName)
			if err != nil {
				if ptrTrue(vol.Secret.Optional) && apierrors.IsNotFound(err) {
					break
				}
				return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
			}
			if files, err = volumeFiles(data, vol.Secret.Items, vol.Secret.DefaultMode); err != nil {
				return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
			}
		case vol.ConfigMap != nil:
			data, err := k.lookup(ctx, "ConfigMap", obj.Namespace, vol.ConfigMap.Name)
			if err != nil {
				if ptrTrue(vol.ConfigMap.Optional) && apierrors.IsNotFound(err) {
					break
				}
				return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
			}
			if files, err = volumeFiles(data, vol.ConfigMap.Items, vol.ConfigMap.DefaultMode); err != nil {
				return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
			}
		case vol.EmptyDir != nil:
		case vol.HostPath != nil:
			// The lab's nodes share one host: each node's host paths live
			// in a folder of its own, kept across its pods (the agent's
			// snapshot survives a restarted pod as on a real node).
			t := ptr.Deref(vol.HostPath.Type, corev1.HostPathUnset)
			if t != corev1.HostPathUnset && t != corev1.HostPathDirectory && t != corev1.HostPathDirectoryOrCreate {
				return nil, fmt.Errorf("volume %s: hostPath type %s is not supported by the lab's kubelet (only directories)", vol.Name, t)
			}
			src = filepath.Join(k.cfg.PodsDir, "hostpath", k.cfg.NodeName, filepath.Clean("/"+vol.HostPath.Path))
		default:
			return nil, fmt.Errorf("volume %s: only secret, configMap, emptyDir and hostPath (directory) volumes are supported by the lab's kubelet", vol.Name)
		}
		if err := writeFiles(src, files); err != nil {
			return nil, err
		}
		mounts = append(mounts, Mount{Source: src, Target: vm.MountPath, ReadOnly: vm.ReadOnly})
	}
	return mounts, nil
}

func writeFiles(dir string, files []volumeFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		p := filepath.Join(dir, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Data, os.FileMode(f.Mode)); err != nil {
			return err
		}
		if err := os.Chmod(p, os.FileMode(f.Mode)); err != nil {
			return err
		}
	}
	return nil
}

// supervisor is a started `lab pod-run`: it has made its mounts and
// waits for run before starting the container.
type supervisor struct {
	proc *podProcess
	goW  *os.File
}

// run hands the supervisor the container to start (the pod is wired).
func (s *supervisor) run(spec ContainerSpec) error {
	defer s.goW.Close()
	if err := json.NewEncoder(s.goW).Encode(spec); err != nil {
		return fmt.Errorf("kubelet: starting the container: %w", err)
	}
	return nil
}

// startSupervisor starts `mooring lab pod-run` in a new mount namespace
// (and network namespace unless hostNetwork) and waits until it has made
// its mounts; supervisor.run then hands it the container.
func startSupervisor(cfg Config, obj *corev1.Pod, dir string, mounts []Mount, workdir string) (*supervisor, error) {
	key := obj.Namespace + "/" + obj.Name
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	goR, goW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, err
	}
	args := []string{"lab", "pod-run", "--ready-fd=3", "--go-fd=4", "--scratch=" + filepath.Join(dir, "scratch")}
	if !obj.Spec.HostNetwork {
		args = append(args, "--own-netns")
	}
	if workdir != "" {
		args = append(args, "--workdir="+workdir)
	}
	for _, m := range mounts {
		flag := "--bind="
		if m.ReadOnly {
			flag = "--bind-ro="
		}
		args = append(args, flag+m.Source+"="+m.Target)
	}
	cmd := exec.Command(cfg.Self, args...)
	// The supervisor's own environment: only the lab's (a test binary's
	// switch); the container's comes with its command line.
	cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, cfg.PodEnv...)
	cmd.ExtraFiles = []*os.File{readyW, goR}
	if cfg.LogDir != "" {
		f, err := os.OpenFile(filepath.Join(cfg.LogDir, "pod-"+obj.Namespace+"-"+obj.Name+".log"),
			os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			readyW.Close()
			goR.Close()
			goW.Close()
			return nil, err
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	flags := uintptr(syscall.CLONE_NEWNS)
	if !obj.Spec.HostNetwork {
		flags |= syscall.CLONE_NEWNET
	}
	// Pdeathsig: see startPodProcess.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	readyW.Close()
	goR.Close()
	if err != nil {
		goW.Close()
		return nil, fmt.Errorf("kubelet: starting pod %s: %w", key, err)
	}
	proc := &podProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		proc.err = cmd.Wait()
		close(proc.done)
	}()
	_ = readyR.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1)
	if _, err := readyR.Read(buf); err != nil {
		proc.kill()
		goW.Close()
		return nil, fmt.Errorf("kubelet: pod %s: its supervisor did not get ready (see the pod's log): %w", key, err)
	}
	return &supervisor{proc: proc, goW: goW}, nil
}
