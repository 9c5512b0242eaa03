package kubelet

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// DefaultPort is the echo server's port when a pod declares none.
const DefaultPort = 8080

// Image is the only image the stand-in runs (as `mooring lab echo`); it is
// never pulled. A tag is allowed ("mooring.dev/lab-echo:v1").
const Image = "mooring.dev/lab-echo"

// runnable says whether the stand-in runs obj, and if not, why. It leaves
// alone what it cannot run faithfully, so that another system sharing the
// lab (e.g. a third-party announcer's hostNetwork pods, started and
// reported by its own harness) keeps its pods and their IPs: a pod in the
// node's own namespace, or a container of another image.
func runnable(obj *corev1.Pod) (bool, string) {
	if obj.Spec.HostNetwork {
		return false, "hostNetwork pod: the lab's kubelet runs only pods with a network namespace of their own"
	}
	for _, c := range obj.Spec.Containers {
		if name, _, _ := strings.Cut(c.Image, ":"); name != Image {
			return false, fmt.Sprintf("container %s has image %q: the lab's kubelet runs only %s", c.Name, c.Image, Image)
		}
	}
	return true, ""
}

// pod is a running pod: its process, addresses and host-side link.
type pod struct {
	key     string
	uid     string       // the CNI container ID: one sandbox per pod object
	addrs   []netip.Addr // pod IPs, IPv4 first
	port    int
	veth    string   // static wiring: the node end of the pod's veth
	netns   *os.File // CNI wiring: the pod's namespace, held until DEL
	started metav1.Time
	proc    *podProcess
	ready   bool
	failed  string        // set when the process exited on its own
	grace   time.Duration // >0: stop with SIGTERM first, SIGKILL after this (Mooring's pods)
	// drainUntil is when a deleted pod with a preStop sleep stops: it
	// keeps serving until then (zero: not deleted yet).
	drainUntil time.Time
}

// podWorkers is how many pods a node starts or stops at once: a test may
// create 110 pods on one node, each costing a process start and, with CNI,
// three plugin runs.
const podWorkers = 4

// runPods watches the pods bound to this node and converges each to
// running-and-ready (or gone), podWorkers at a time, once the pod network
// is ready.
func (k *kubelet) runPods(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(k.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = "spec.nodeName=" + k.cfg.NodeName
		}))
	inf := factory.Core().V1().Pods()
	lister := inf.Lister()
	// A pod whose network cannot be set up yet (its pool's block is on its
	// way) is retried within 2 s, not after minutes of back-off.
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 2*time.Second))
	k.requeue = func(key string) { queue.Add(key) }
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	// Every update re-syncs the pod, so a status someone else wrote (a
	// Ready=False from Mooring's fast endpoint eviction while the node is
	// alive) is taken back within one round trip, as the kubelet's status
	// manager does; measured at 0.05-0.12 s in the lab (docs/benchmarks.md).
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	// Like a kubelet whose runtime reports NetworkReady=false: no pod
	// starts before the network plugin is ready.
	if err := k.net.ready(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	var wg sync.WaitGroup
	for range podWorkers {
		wg.Go(func() {
			for {
				key, quit := queue.Get()
				if quit {
					return
				}
				if err := k.sync(ctx, lister, key); err != nil && ctx.Err() == nil {
					k.log.Warn("syncing pod", "pod", key, "err", err)
					queue.AddRateLimited(key)
				} else {
					queue.Forget(key)
				}
				queue.Done(key)
			}
		})
	}
	wg.Wait()
	return nil
}

// sync makes one pod's reality match its object.
func (k *kubelet) sync(ctx context.Context, lister corelisters.PodLister, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	obj, err := lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		k.stop(key)
		return nil
	}
	if err != nil {
		return err
	}
	if ok, why := k.runnable(obj); !ok {
		k.leaveAlone(ctx, obj, why)
		return nil
	}
	if obj.DeletionTimestamp != nil {
		if k.draining(key, obj) {
			return nil
		}
		k.stop(key)
		// The kubelet confirms a graceful deletion by deleting with grace 0.
		err := k.cfg.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &obj.UID},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	}
	k.mu.Lock()
	p := k.pods[key]
	k.mu.Unlock()
	if p == nil {
		if p, err = k.start(ctx, obj); err != nil {
			return err
		}
	}
	return k.writeStatus(ctx, obj, p)
}

// draining says whether the deleted pod key still runs its preStop sleep
// (lifecycle.preStop.sleep, capped by the deletion's grace period), as a
// kubelet runs the hook before it stops the containers: the pod keeps
// serving, and the EndpointSlice shows it terminating (serving, not
// ready), which is how a Deployment's rolling update drains it. It
// requeues the pod for the end of the sleep.
func (k *kubelet) draining(key string, obj *corev1.Pod) bool {
	sleep := preStopSleep(obj)
	if sleep <= 0 {
		return false
	}
	k.mu.Lock()
	p := k.pods[key]
	if p == nil {
		k.mu.Unlock()
		return false
	}
	if p.drainUntil.IsZero() {
		p.drainUntil = time.Now().Add(sleep)
		k.log.Info("pod terminating: preStop sleep", "pod", key, "sleep", sleep)
	}
	left := time.Until(p.drainUntil)
	k.mu.Unlock()
	if left <= 0 {
		return false
	}
	if k.requeue != nil {
		time.AfterFunc(left, func() { k.requeue(key) })
	}
	return true
}

// preStopSleep is the longest preStop sleep of obj's containers, capped by
// its deletion grace period.
func preStopSleep(obj *corev1.Pod) time.Duration {
	var d time.Duration
	for _, c := range obj.Spec.Containers {
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			d = max(d, time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second)
		}
	}
	if g := obj.DeletionGracePeriodSeconds; g != nil {
		d = min(d, time.Duration(*g)*time.Second)
	}
	return d
}

// AnnotationRunBy marks a pod that another part of the lab runs and
// reports (e.g. the MetalLB supervisor's speaker pods): the stand-in leaves
// it alone without a word on the pod.
const AnnotationRunBy = "lab.mooring.dev/run-by"

// EventReasonNotRun is the Warning Event the stand-in records on a pod it
// will not run, so that `kubectl describe pod` says why it stays Pending.
const EventReasonNotRun = "LabCannotRun"

// leaveAlone says once why a pod is not run: in the log and, unless another
// part of the lab runs it (AnnotationRunBy), as a Warning Event on the pod.
// Its status stays whatever its owner writes; a requested deletion is
// confirmed, as a kubelet with nothing to stop for it would.
func (k *kubelet) leaveAlone(ctx context.Context, obj *corev1.Pod, why string) {
	key := obj.Namespace + "/" + obj.Name
	k.mu.Lock()
	first := !k.ignored[key]
	k.ignored[key] = true
	k.mu.Unlock()
	if first {
		k.log.Info("leaving pod alone", "pod", key, "why", why)
		if obj.Annotations[AnnotationRunBy] == "" && obj.DeletionTimestamp == nil {
			k.eventNotRun(ctx, obj, why)
		}
	}
	if obj.DeletionTimestamp != nil {
		err := k.cfg.Client.CoreV1().Pods(obj.Namespace).Delete(ctx, obj.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &obj.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			k.log.Warn("confirming the deletion of a pod left alone", "pod", key, "err", err)
		}
	}
}

// eventNotRun records EventReasonNotRun on obj, as a kubelet records its
// own Warnings (source kubelet on this node). A failure is only logged: the
// pod is left alone either way.
func (k *kubelet) eventNotRun(ctx context.Context, obj *corev1.Pod, why string) {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: obj.Name + ".", Namespace: obj.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: obj.Namespace, Name: obj.Name,
			UID: obj.UID, ResourceVersion: obj.ResourceVersion},
		Type: corev1.EventTypeWarning, Reason: EventReasonNotRun,
		Message: "the lab's kubelet stand-in does not run this pod, so it stays Pending: " + why +
			"; give its containers the image " + Image + " (an HTTP echo server on the container's first port), or run it outside the lab",
		Source:         corev1.EventSource{Component: "kubelet", Host: k.cfg.NodeName},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "kubelet", ReportingInstance: k.cfg.NodeName,
	}
	if _, err := k.cfg.Client.CoreV1().Events(obj.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		k.log.Warn("recording why a pod is left alone", "pod", obj.Namespace+"/"+obj.Name, "err", err)
	}
}

// start runs the pod's echo process, wires its network and waits until it
// accepts connections.
func (k *kubelet) start(ctx context.Context, obj *corev1.Pod) (*pod, error) {
	if k.isMooringPod(obj) {
		return k.startMooring(ctx, obj)
	}
	key := obj.Namespace + "/" + obj.Name
	p := &pod{key: key, uid: string(obj.UID), port: podPort(obj), started: metav1.Now()}
	proc, err := startPodProcess(k.cfg, obj, p)
	if err != nil {
		return nil, err
	}
	p.proc = proc
	if err := k.net.wire(ctx, obj, p); err != nil {
		k.net.unwire(ctx, p)
		proc.kill()
		return nil, err
	}
	if err := waitListening(ctx, p); err != nil {
		k.net.unwire(ctx, p)
		proc.kill()
		return nil, err
	}
	p.ready = true
	k.mu.Lock()
	k.pods[key] = p
	k.mu.Unlock()
	k.log.Info("pod running", "pod", key, "ips", p.addrs, "pid", proc.pid())
	go func() {
		<-proc.done
		k.mu.Lock()
		cur := k.pods[key] == p
		if cur && p.failed == "" && !proc.stopping.Load() {
			p.ready = false
			p.failed = "echo process exited: " + proc.exitErr().Error()
		}
		k.mu.Unlock()
		if cur && k.requeue != nil {
			k.requeue(key)
		}
	}()
	return p, nil
}

// stop kills a pod's process and removes its link.
func (k *kubelet) stop(key string) {
	k.mu.Lock()
	p := k.pods[key]
	delete(k.pods, key)
	k.mu.Unlock()
	if p == nil {
		return
	}
	// As a runtime stops a sandbox: the containers (gracefully, for
	// Mooring's pods), then the network (CNI DEL, while the namespace is
	// still held), then the process.
	terminate(p)
	k.net.unwire(context.Background(), p)
	p.proc.kill()
	k.log.Info("pod stopped", "pod", key)
}

func (k *kubelet) stopAll() {
	k.mu.Lock()
	var keys []string
	for key := range k.pods {
		keys = append(keys, key)
	}
	k.mu.Unlock()
	for _, key := range keys {
		k.stop(key)
	}
}

// waitListening dials the pod's IPv4 address until the echo server accepts
// (the lab's whole readiness probe), for at most 5 s.
func waitListening(ctx context.Context, p *pod) error {
	addr := net.JoinHostPort(p.addrs[0].String(), strconv.Itoa(p.port))
	var last error
	for range 100 {
		d := net.Dialer{Timeout: 200 * time.Millisecond}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("kubelet: pod %s never accepted on %s: %w", p.key, addr, last)
}

// writeStatus publishes what the node knows about the pod.
func (k *kubelet) writeStatus(ctx context.Context, obj *corev1.Pod, p *pod) error {
	k.mu.Lock()
	ready, failed := p.ready, p.failed
	k.mu.Unlock()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := k.cfg.Client.CoreV1().Pods(obj.Namespace).Get(ctx, obj.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status = podStatus(cur, p, k.cfg.NodeIPs, ready, failed)
		_, err = k.cfg.Client.CoreV1().Pods(obj.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// podStatus is a pod's status as a kubelet would write it.
func podStatus(obj *corev1.Pod, p *pod, nodeIPs []netip.Addr, ready bool, failed string) corev1.PodStatus {
	cond := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}
		if ok {
			c.Status = corev1.ConditionTrue
		}
		for _, o := range obj.Status.Conditions {
			if o.Type == t && o.Status == c.Status {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		return c
	}
	st := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    nodeIPs[0].String(),
		PodIP:     p.addrs[0].String(),
		StartTime: &p.started,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers, true),
			cond(corev1.PodInitialized, true),
			cond(corev1.PodReady, ready),
			cond(corev1.ContainersReady, ready),
			cond(corev1.PodScheduled, true),
		},
	}
	// Like the kubelet's status manager, keep the conditions others own
	// (e.g. DisruptionTarget, readiness gates) and take back its own: a
	// Ready=False written by someone else while the pod runs is undone.
	for _, o := range obj.Status.Conditions {
		if !slices.ContainsFunc(st.Conditions, func(c corev1.PodCondition) bool { return c.Type == o.Type }) {
			st.Conditions = append(st.Conditions, o)
		}
	}
	if failed != "" {
		st.Phase, st.Reason, st.Message = corev1.PodFailed, "Error", failed
	}
	for _, a := range nodeIPs {
		st.HostIPs = append(st.HostIPs, corev1.HostIP{IP: a.String()})
	}
	for _, a := range p.addrs {
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: a.String()})
	}
	for _, c := range obj.Spec.Containers {
		cs := corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: ready, Started: ptr.To(failed == ""),
			ContainerID: fmt.Sprintf("mooring-lab://%d", p.proc.pid()),
		}
		if failed == "" {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: p.started}
		} else {
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: failed}
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	return st
}

// podPort is the first declared TCP container port, else DefaultPort.
func podPort(obj *corev1.Pod) int {
	for _, c := range obj.Spec.Containers {
		for _, p := range c.Ports {
			if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
				return int(p.ContainerPort)
			}
		}
	}
	return DefaultPort
}

// nthAddr returns the address n past the start of p (n < 256).
func nthAddr(p netip.Prefix, n int) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	b[len(b)-1] += byte(n)
	a, _ := netip.AddrFromSlice(b)
	return a
}
