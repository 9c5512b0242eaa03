package realnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// KernelDefaults are the host-wide sysctls a kubelet insists on
// (k8s.io/kubernetes pkg/kubelet/cm setupKernelTunables): with
// protectKernelDefaults it refuses to start unless they hold, without it
// it writes them itself. They are not namespaced, so the lab sets them
// once for every real node and restores them when the last lab leaves.
var KernelDefaults = map[string]string{
	"vm.overcommit_memory":      "1",
	"vm.panic_on_oom":           "0",
	"kernel.panic":              "10",
	"kernel.panic_on_oops":      "1",
	"kernel.keys.root_maxkeys":  "1000000",
	"kernel.keys.root_maxbytes": "25000000",
}

// Host is the host-wide state every lab with real nodes on this machine
// shares: the kernel values above, and the mount-point folders the nodes'
// binds need (created when missing). The first lab to need a value records
// the host's own; the last one to leave restores it, and removes the
// folders the labs created. The record lives in HostFile under a lock on
// /run (nothing of it stays once the last lab has left); a lab that died
// without leaving is dropped when the next one comes or goes.
type Host struct {
	// ID names the lab (its state dir); PID is its process.
	ID  string
	PID int

	// recordFile and sysctlDir replace HostFile and /proc/sys when set
	// (tests run the record's rules on a private file and tree, so they
	// need not wait for the labs that hold the real host).
	recordFile, sysctlDir string
}

func (h Host) record() string {
	if h.recordFile != "" {
		return h.recordFile
	}
	return HostFile
}

func (h Host) sysctls() sysctlTree {
	if h.sysctlDir != "" {
		return sysctlTree(h.sysctlDir)
	}
	return procSys
}

// procSys is the kernel's sysctl tree.
const procSys sysctlTree = "/proc/sys"

// HostFile is the shared record.
const HostFile = "/run/mooring-lab-host.json"

type hostRecord struct {
	Holders map[string]int    `json:"holders"`           // lab ID -> PID
	Sysctls map[string]string `json:"sysctls,omitempty"` // the host's own values
	Dirs    []string          `json:"dirs,omitempty"`    // folders the labs created, parents first
}

// Acquire registers the lab, sets KernelDefaults (recording the host's
// values first) and creates the missing mount points.
func (h Host) Acquire(mountPoints []string) error {
	sys := h.sysctls()
	return withHostRecord(h.record(), func(r *hostRecord) error {
		r.Holders[h.ID] = h.PID
		for _, k := range slices.Sorted(maps.Keys(KernelDefaults)) {
			cur, err := sys.read(k)
			if err != nil {
				return err
			}
			if _, ok := r.Sysctls[k]; !ok && cur != KernelDefaults[k] {
				r.Sysctls[k] = cur
			}
			if cur != KernelDefaults[k] {
				if err := sys.write(k, KernelDefaults[k]); err != nil {
					return err
				}
			}
		}
		for _, d := range mountPoints {
			if err := mkdirRecorded(d, r); err != nil {
				return err
			}
		}
		return nil
	})
}

// Release unregisters the lab; when no live lab is left it restores the
// sysctls and removes the created folders (deepest first; a folder
// something else has since filled is left, and reported).
func (h Host) Release() error {
	return withHostRecord(h.record(), func(r *hostRecord) error {
		delete(r.Holders, h.ID)
		if len(r.Holders) > 0 {
			return nil
		}
		return restoreHost(r, h.sysctls())
	})
}

func restoreHost(r *hostRecord, sys sysctlTree) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(r.Sysctls)) {
		if err := sys.write(k, r.Sysctls[k]); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(r.Sysctls, k)
	}
	for i := len(r.Dirs) - 1; i >= 0; i-- {
		if err := os.Remove(r.Dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("realnode: removing %s, which a lab created: %w", r.Dirs[i], err))
			continue
		}
		r.Dirs = slices.Delete(r.Dirs, i, i+1)
	}
	return errors.Join(errs...)
}

// mkdirRecorded creates d and its missing parents, recording each.
func mkdirRecorded(d string, r *hostRecord) error {
	var missing []string
	for p := filepath.Clean(d); p != "/"; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("realnode: creating mount point %s: %w", missing[i], err)
		}
		if !slices.Contains(r.Dirs, missing[i]) {
			r.Dirs = append(r.Dirs, missing[i])
		}
	}
	return nil
}

// withHostRecord runs fn on the record in file under an exclusive lock on
// its folder (/run for HostFile), dropping dead holders first, and writes
// the record back (or removes the file once nothing is left to remember).
func withHostRecord(file string, fn func(*hostRecord) error) error {
	lock, err := os.Open(filepath.Dir(file))
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("realnode: locking %s: %w", lock.Name(), err)
	}
	r := &hostRecord{Holders: map[string]int{}, Sysctls: map[string]string{}}
	if b, err := os.ReadFile(file); err == nil {
		if err := json.Unmarshal(b, r); err != nil {
			return fmt.Errorf("realnode: %s is damaged (%w): restore the values it names by hand and remove it", file, err)
		}
		if r.Holders == nil {
			r.Holders = map[string]int{}
		}
		if r.Sysctls == nil {
			r.Sysctls = map[string]string{}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for id, pid := range r.Holders {
		if unix.Kill(pid, 0) != nil {
			delete(r.Holders, id)
		}
	}
	ferr := fn(r)
	if len(r.Holders) == 0 && len(r.Sysctls) == 0 && len(r.Dirs) == 0 {
		if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
			return errors.Join(ferr, err)
		}
		return ferr
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err == nil {
		err = os.WriteFile(file, append(b, '\n'), 0o600)
	}
	return errors.Join(ferr, err)
}

// sysctlTree is /proc/sys, or a copy of its layout in a test.
type sysctlTree string

func (t sysctlTree) file(key string) string {
	return filepath.Join(string(t), strings.ReplaceAll(key, ".", "/"))
}

func (t sysctlTree) read(key string) (string, error) {
	b, err := os.ReadFile(t.file(key))
	if err != nil {
		return "", fmt.Errorf("realnode: reading %s: %w", key, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (t sysctlTree) write(key, v string) error {
	if err := os.WriteFile(t.file(key), []byte(v), 0); err != nil {
		return fmt.Errorf("realnode: setting %s=%s: %w", key, v, err)
	}
	return nil
}

// ReadSysctls returns the current values of KernelDefaults' keys (tests
// compare them before and after a lab).
func ReadSysctls() (map[string]string, error) {
	out := map[string]string{}
	for k := range KernelDefaults {
		v, err := procSys.read(k)
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}
