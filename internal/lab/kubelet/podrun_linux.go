package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// errNoMountPoint: a mount target whose only existing ancestor is /.
var errNoMountPoint = errors.New("no existing folder below / to hold the mount point")

// PodRun makes the pod's mounts, reports ready, waits for the go, then runs
// the container and restarts it whenever it exits, until ctx ends (SIGTERM
// is passed on to the container first). It holds the pod's namespaces.
func PodRun(ctx context.Context, cfg PodRunConfig) error {
	// Every child is forked by this thread, which never ends before the
	// process: Pdeathsig fires when the forking thread exits.
	runtime.LockOSThread()
	if cfg.OwnNetNS {
		for _, f := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+f+"/accept_dad", []byte("0"), 0o644); err != nil {
				return fmt.Errorf("pod-run: turning off DAD: %w", err)
			}
		}
	}
	if err := makeMounts(cfg.Scratch, cfg.Binds); err != nil {
		return err
	}
	ready := os.NewFile(uintptr(cfg.ReadyFD), "ready")
	_, err := ready.Write([]byte{1})
	ready.Close()
	if err != nil {
		return fmt.Errorf("pod-run: reporting ready: %w", err)
	}
	gofd := os.NewFile(uintptr(cfg.GoFD), "go")
	var spec ContainerSpec
	err = json.NewDecoder(gofd).Decode(&spec)
	gofd.Close()
	if err != nil {
		return fmt.Errorf("pod-run: the kubelet gave up on the pod: %w", err)
	}
	if len(spec.Argv) == 0 {
		return errors.New("pod-run: no command")
	}
	delay := cfg.RestartDelay
	if delay <= 0 {
		delay = time.Second
	}
	for {
		start := time.Now()
		err := runContainer(ctx, cfg, spec)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > 10*time.Second {
			delay = cfg.RestartDelay
			if delay <= 0 {
				delay = time.Second
			}
		}
		cfg.Log.Warn("container exited; restarting (restartPolicy Always)", "err", err, "after", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}

// runContainer runs the container once. When ctx ends (the supervisor got
// SIGTERM) the container gets SIGTERM and 30 s; the supervisor's death
// kills it (Pdeathsig).
func runContainer(ctx context.Context, cfg PodRunConfig, spec ContainerSpec) error {
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Env = spec.Env
	cmd.Dir = cfg.Workdir
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			return <-done
		}
	}
}

// makeMounts makes every bind mount of the pod inside its mount namespace
// (private: nothing propagates to the host). A target that does not exist
// is created in an overlay over its nearest existing ancestor, whose upper
// layer is a tmpfs: the host's file system is never written.
func makeMounts(scratch string, binds []Mount) error {
	if len(binds) == 0 {
		return nil
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("pod-run: making mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700"); err != nil {
		return fmt.Errorf("pod-run: scratch tmpfs on %s: %w", scratch, err)
	}
	// Open the scratch and the sources first: an overlay may hide their
	// paths (and an overlay's upper layer may not lie on an overlay).
	sfd, err := unix.Open(scratch, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("pod-run: opening %s: %w", scratch, err)
	}
	defer unix.Close(sfd)
	scratch = fmt.Sprintf("/proc/self/fd/%d", sfd)
	fds := make([]int, len(binds))
	for i, b := range binds {
		fd, err := unix.Open(b.Source, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("pod-run: opening %s: %w", b.Source, err)
		}
		defer unix.Close(fd)
		fds[i] = fd
	}
	var overlays []string
	for i, b := range binds {
		if err := mountPoint(b.Target, scratch, &overlays); err != nil {
			return fmt.Errorf("pod-run: mount point %s: %w", b.Target, err)
		}
		src := fmt.Sprintf("/proc/self/fd/%d", fds[i])
		if err := unix.Mount(src, b.Target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("pod-run: binding %s to %s: %w", b.Source, b.Target, err)
		}
		if b.ReadOnly {
			if err := unix.Mount("", b.Target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
				return fmt.Errorf("pod-run: making %s read-only: %w", b.Target, err)
			}
		}
	}
	return nil
}

// mountPoint makes sure target exists as a folder, creating it inside an
// overlay (recorded in overlays) when it does not.
func mountPoint(target, scratch string, overlays *[]string) error {
	if st, err := os.Stat(target); err == nil {
		if !st.IsDir() {
			return errors.New("exists and is not a folder")
		}
		return nil
	}
	anc := filepath.Dir(target)
	for {
		if st, err := os.Stat(anc); err == nil && st.IsDir() {
			break
		}
		anc = filepath.Dir(anc)
	}
	real, err := filepath.EvalSymlinks(anc)
	if err != nil {
		return err
	}
	inOverlay := false
	for _, o := range *overlays {
		if real == o || strings.HasPrefix(real, o+"/") {
			inOverlay = true
		}
	}
	if !inOverlay {
		if real == "/" {
			return errNoMountPoint
		}
		n := len(*overlays)
		upper, work := filepath.Join(scratch, fmt.Sprint(n), "upper"), filepath.Join(scratch, fmt.Sprint(n), "work")
		for _, d := range []string{upper, work} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		opts := "lowerdir=" + real + ",upperdir=" + upper + ",workdir=" + work
		if err := unix.Mount("overlay", real, "overlay", 0, opts); err != nil {
			return fmt.Errorf("overlay on %s: %w", real, err)
		}
		*overlays = append(*overlays, real)
	}
	return os.MkdirAll(target, 0o755)
}
