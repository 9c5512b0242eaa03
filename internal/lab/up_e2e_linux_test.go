package lab_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/kubelet"
)

// TestLabUpNoMooringInterrupted runs `mooring lab up --no-mooring` as
// `make demo | tee log` would, checks the bench it leaves for another
// implementation (the Service has no loadBalancerClass, no Mooring process
// runs), then closes the read end of its output, as a Ctrl-C'd tee does,
// and interrupts it: the teardown must complete although every write to
// its output now fails (issue 8 items 12 and 16).
func TestLabUpNoMooringInterrupted(t *testing.T) {
	kubebin, crds := requireLab(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "lab")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "lab", "--state-dir", dir, "up", "--no-mooring", "--nodes", "2",
		"--kubebin", kubebin, "--crds", crds, "--timeout", "90s")
	cmd.Env = append(os.Environ(), envSelf+"=1")
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	}()

	var out bytes.Buffer
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "Ready in") {
				ready <- true
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("lab up ended before ready:\n%s", out.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("lab up not ready after 2 minutes:\n%s", out.String())
	}
	t.Logf("lab up said:\n%s", out.String())
	if !strings.Contains(out.String(), "ClusterIP (no LoadBalancer address: Mooring is not running)") {
		t.Errorf("lab up --no-mooring did not say the Service has only a ClusterIP")
	}

	rc, err := kube.RESTConfig(filepath.Join(dir, "kubeconfig"), 20, 40)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services(lab.DemoNamespace).Get(context.Background(), lab.DemoService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.LoadBalancerClass != nil {
		t.Errorf("--no-mooring: the Service has loadBalancerClass %q, want none so another implementation can serve it", *svc.Spec.LoadBalancerClass)
	}
	// A pod of an image the kubelet stand-in does not run stays Pending,
	// and the pod says why (issue 18: it was only in the lab's log).
	pod, err := cs.CoreV1().Pods(lab.DemoNamespace).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx"},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		evs, err := cs.CoreV1().Events(lab.DemoNamespace).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Pod,involvedObject.name=nginx,involvedObject.uid=" + string(pod.UID)})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) > 0 {
			e := evs.Items[0]
			if e.Type != corev1.EventTypeWarning || e.Reason != kubelet.EventReasonNotRun || !strings.Contains(e.Message, `"nginx:1.27"`) ||
				!strings.Contains(e.Message, kubelet.Image) || e.Source.Host != "node-1" {
				t.Errorf("the pod's Event: %s %s from %+v: %s", e.Type, e.Reason, e.Source, e.Message)
			}
			t.Logf("pod of another image: %s %s: %s", e.Type, e.Reason, e.Message)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a pod whose image the lab's kubelet does not run got no Event within 20 s")
		}
	}

	for _, pid := range labProcesses(dir) {
		if args := cmdline(pid); strings.HasPrefix(args, self+" controller") || strings.HasPrefix(args, self+" agent") {
			t.Errorf("--no-mooring: process %d runs %q", pid, args)
		}
	}

	// The reader goes away (tee ended by Ctrl-C), then the interrupt.
	r.Close()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Errorf("lab up died of %v while tearing down", ws.Signal())
			} else {
				t.Errorf("lab up: %v", err)
			}
		} else if err != nil {
			t.Errorf("lab up: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("lab up did not stop within 30 s of SIGINT")
	}
	checkNothingLeft(t, dir)
}

// labProcesses lists the processes whose command line names dir.
func labProcesses(dir string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if strings.Contains(cmdline(pid), dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}
