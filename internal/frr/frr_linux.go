package frr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooringlb/mooring/internal/netlab"
)

// Where Debian's frr package puts things.
const (
	daemonDir = "/usr/lib/frr"
	// frrTmp holds a folder per daemon process (<daemon>.<pid>) that FRR
	// creates as root and cannot remove once it has dropped to user frr.
	frrTmp = "/var/tmp/frr"
)

// Instance is one running router: zebra, bfdd and bgpd in one namespace,
// every file of theirs in Dir.
type Instance struct {
	Client // queries and configures the running daemons

	cfg    Config
	host   *netlab.Host
	ownDir bool

	mu     sync.Mutex
	procs  map[string]*netlab.Process
	logs   []*os.File
	closed bool
}

// Check reports whether FRR is installed (ErrNotInstalled otherwise).
func Check() error {
	for _, p := range []string{filepath.Join(daemonDir, "zebra"), filepath.Join(daemonDir, "bgpd"),
		filepath.Join(daemonDir, "bfdd"), vtyshPath} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w (%s: %w)", ErrNotInstalled, p, err)
		}
	}
	if _, err := user.Lookup("frr"); err != nil {
		return fmt.Errorf("%w (user frr: %w)", ErrNotInstalled, err)
	}
	return nil
}

// Start writes cfg's files into dir (a new temporary folder, removed by
// Stop, when dir is ""; else it must exist) and starts the daemons inside
// h's namespace. It returns once bgpd has loaded its configuration. The
// daemons are h's processes: they die with the lab, or with this process.
func Start(ctx context.Context, h *netlab.Host, dir string, cfg Config) (*Instance, error) {
	files, err := cfg.Files()
	if err != nil {
		return nil, err
	}
	if err := Check(); err != nil {
		return nil, err
	}
	sweepTmp()
	i := &Instance{Client: Client{Dir: dir}, cfg: cfg, host: h, procs: map[string]*netlab.Process{}}
	if dir == "" {
		if i.Dir, err = os.MkdirTemp("", "mooring-frr-"); err != nil {
			return nil, fmt.Errorf("frr: %w", err)
		}
		i.ownDir = true
	}
	if err := writeFiles(i.Dir, files); err != nil {
		return nil, errors.Join(err, i.Stop())
	}
	for _, d := range daemons {
		if err := i.start(d); err != nil {
			return nil, errors.Join(err, i.Stop())
		}
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := i.waitLoaded(ctx); err != nil {
		return nil, errors.Join(err, i.Stop())
	}
	return i, nil
}

// writeFiles writes the configuration files and hands dir to user frr,
// as which the daemons run once they have opened their sockets.
func writeFiles(dir string, files map[string]string) error {
	u, err := user.Lookup("frr")
	if err != nil {
		return fmt.Errorf("%w (user frr: %w)", ErrNotInstalled, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("frr: %w", err)
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o640); err != nil {
			return fmt.Errorf("frr: %w", err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			return fmt.Errorf("frr: %w", err)
		}
	}
	return nil
}

// start runs one daemon in the namespace, its output in <dir>/<daemon>.log.
func (i *Instance) start(d string) error {
	args := []string{
		"-f", filepath.Join(i.Dir, d+".conf"),
		"-i", filepath.Join(i.Dir, d+".pid"),
		"--vty_socket", i.Dir,
		"-z", filepath.Join(i.Dir, "zserv.api"),
		"-P", "0", // no vty TCP port
		// FRR sizes tables by the fd limit, which can be a million here.
		"--limit-fds", "1024",
		"--log", "stdout",
	}
	switch d {
	case "bfdd":
		args = append(args, "--bfdctl", filepath.Join(i.Dir, "bfdd.sock"))
	case "bgpd":
		if i.cfg.Port != 0 {
			args = append(args, "-p", strconv.Itoa(i.cfg.Port))
		}
	}
	log, err := os.OpenFile(filepath.Join(i.Dir, d+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("frr: %w", err)
	}
	cmd := exec.Command(filepath.Join(daemonDir, d), args...)
	cmd.Stdout, cmd.Stderr = log, log
	p, err := i.host.Start(cmd)
	if err != nil {
		log.Close()
		return fmt.Errorf("frr: starting %s: %w", d, err)
	}
	i.mu.Lock()
	i.procs[d] = p
	i.logs = append(i.logs, log)
	i.mu.Unlock()
	if d == "zebra" {
		// bgpd and bfdd connect to zebra's socket at start.
		return i.waitFile(d, "zserv.api")
	}
	return nil
}

// waitFile waits until name appears in the folder, or d exits.
func (i *Instance) waitFile(d, name string) error {
	deadline := time.Now().Add(startTimeout)
	for {
		if _, err := os.Stat(filepath.Join(i.Dir, name)); err == nil {
			return nil
		}
		select {
		case <-i.procs[d].Done():
			return fmt.Errorf("frr: %s exited at start: %s", d, i.LogTail(d, 5))
		case <-time.After(pollInterval):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("frr: %s did not create %s within %s: %s", d, name, startTimeout, i.LogTail(d, 5))
		}
	}
}

// waitLoaded waits until every daemon answers on its vty socket and bgpd
// shows the router's configuration.
func (i *Instance) waitLoaded(ctx context.Context) error {
	want := fmt.Sprintf("router bgp %d", i.cfg.ASN)
	for {
		for _, d := range daemons {
			select {
			case <-i.procs[d].Done():
				return fmt.Errorf("frr: %s exited at start: %s", d, i.LogTail(d, 5))
			default:
			}
		}
		out, err := i.Vtysh(ctx, "show running-config")
		if err == nil && bytes.Contains(out, []byte(want)) && i.socketsUp() {
			return i.configErrors()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("frr: the daemons did not load their configuration (last: %v): %s", err, i.LogTail("bgpd", 5))
		case <-time.After(pollInterval):
		}
	}
}

// configErrors reports the configuration lines a daemon refused, which
// FRR only logs: a router missing part of its configuration is not the
// router the caller asked for.
func (i *Instance) configErrors() error {
	var errs []error
	for _, d := range daemons {
		b, _ := os.ReadFile(filepath.Join(i.Dir, d+".log"))
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "on config line") {
				errs = append(errs, fmt.Errorf("frr: %s refused its configuration: %s", d, l))
			}
		}
	}
	return errors.Join(errs...)
}

func (i *Instance) socketsUp() bool {
	for _, d := range daemons {
		if _, err := os.Stat(filepath.Join(i.Dir, d+".vty")); err != nil {
			return false
		}
	}
	return true
}

// LogTail returns the last n lines of daemon d's log, on one line.
func (i *Instance) LogTail(d string, n int) string {
	b, err := os.ReadFile(filepath.Join(i.Dir, d+".log"))
	if err != nil {
		return d + ": no log"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return d + ": " + strings.Join(lines, " | ")
}

// Stop ends the daemons (SIGTERM, so bgpd closes its sessions with a Cease
// as a router being shut down does; SIGKILL after a grace period) and
// removes what they left: FRR's per-process folders under /var/tmp/frr,
// and Dir when Start made it. It is idempotent.
func (i *Instance) Stop() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return nil
	}
	i.closed = true
	var errs []error
	for k := len(daemons) - 1; k >= 0; k-- {
		p := i.procs[daemons[k]]
		if p == nil {
			continue
		}
		if err := unix.Kill(p.PID, unix.SIGTERM); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("frr: stopping %s: %w", daemons[k], err))
		}
		select {
		case <-p.Done():
		case <-time.After(stopTimeout):
			errs = append(errs, p.Kill())
			<-p.Done()
		}
		removeTmp(daemons[k], p.PID)
	}
	for _, f := range i.logs {
		f.Close()
	}
	if i.ownDir {
		errs = append(errs, os.RemoveAll(i.Dir))
	}
	return errors.Join(errs...)
}

// Kill SIGKILLs every daemon at once, as a router crash or power loss:
// no Cease, no withdrawal. Stop still cleans up afterwards.
func (i *Instance) Kill() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	var errs []error
	for _, p := range i.procs {
		errs = append(errs, p.Kill())
	}
	for _, p := range i.procs {
		<-p.Done()
	}
	return errors.Join(errs...)
}

// Pause stops daemon d (SIGSTOP) until Resume, as a daemon that hangs:
// its sockets stay open, it sends and answers nothing. Resume it before
// Stop, which waits for a SIGTERM a stopped daemon cannot act on.
func (i *Instance) Pause(d string) error { return i.signal(d, unix.SIGSTOP) }

// Resume continues a paused daemon (SIGCONT).
func (i *Instance) Resume(d string) error { return i.signal(d, unix.SIGCONT) }

func (i *Instance) signal(d string, sig unix.Signal) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	p := i.procs[d]
	if p == nil {
		return fmt.Errorf("frr: no %s running", d)
	}
	if err := unix.Kill(p.PID, sig); err != nil {
		return fmt.Errorf("frr: signalling %s: %w", d, err)
	}
	return nil
}

// removeTmp removes the folder FRR made for one of its processes (with
// its crash-log buffers, which a killed daemon leaves).
func removeTmp(daemon string, pid int) {
	os.RemoveAll(filepath.Join(frrTmp, daemon+"."+strconv.Itoa(pid)))
}

// sweepTmp removes the per-process folders of zebra, bgpd and bfdd
// processes that no longer run (left by a killed test binary or lab), so
// that they do not pile up; a running router's are never touched.
func sweepTmp() {
	ents, err := os.ReadDir(frrTmp)
	if err != nil {
		return
	}
	for _, e := range ents {
		name, pidText, ok := strings.Cut(e.Name(), ".")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || !isDaemon(name) || pid <= 0 {
			continue
		}
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			os.RemoveAll(filepath.Join(frrTmp, e.Name()))
		}
	}
}

func isDaemon(name string) bool {
	for _, d := range daemons {
		if d == name {
			return true
		}
	}
	return false
}
