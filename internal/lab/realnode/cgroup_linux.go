package realnode

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// CgroupMountRoot is where the host's cgroup hierarchies are mounted.
const CgroupMountRoot = "/sys/fs/cgroup"

// hierarchies lists the mounted cgroup hierarchies (v1 controllers, named
// ones and a v2 mount such as unified) from /proc/self/mountinfo.
func hierarchies() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if t := fields[sep+1]; (t == "cgroup" || t == "cgroup2") && strings.HasPrefix(fields[4], CgroupMountRoot+"/") {
			out = append(out, fields[4])
		}
	}
	return out, sc.Err()
}

// CreateCgroup makes parent (e.g. /mooring-lab-1a2b/node-1) in every
// hierarchy: the kubelet refuses a cgroupRoot that does not exist. New
// cpuset cgroups get their parent's CPUs and memory nodes, or nothing
// could join them.
func CreateCgroup(parent string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := h
		for _, part := range strings.Split(strings.Trim(parent, "/"), "/") {
			up := dir
			dir = filepath.Join(dir, part)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("realnode: creating cgroup %s: %w", dir, err)
			}
			if err := inheritCpuset(up, dir); err != nil {
				return err
			}
		}
	}
	return nil
}

func inheritCpuset(parent, dir string) error {
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		cur, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || strings.TrimSpace(string(cur)) != "" {
			continue // not a cpuset hierarchy, or already set
		}
		v, err := os.ReadFile(filepath.Join(parent, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f), v, 0); err != nil {
			return fmt.Errorf("realnode: %s/%s: %w", dir, f, err)
		}
	}
	return nil
}

// CgroupPIDs lists every process in parent's subtree, in any hierarchy.
func CgroupPIDs(parent string) ([]int, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	for _, h := range hs {
		root := filepath.Join(h, parent)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil // removed meanwhile
			}
			for _, l := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(l); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// KillCgroup SIGKILLs every process in parent's subtree until none is
// left (for at most limit): a killed node's containers, whatever their
// network or mount namespace. It returns how many it killed.
func KillCgroup(parent string, limit time.Duration) (int, error) {
	killed := map[int]bool{}
	deadline := time.Now().Add(limit)
	for {
		pids, err := CgroupPIDs(parent)
		if err != nil {
			return len(killed), err
		}
		if len(pids) == 0 {
			return len(killed), nil
		}
		if time.Now().After(deadline) {
			return len(killed), fmt.Errorf("realnode: processes %v still in cgroup %s %v after SIGKILL", pids, parent, limit)
		}
		for _, pid := range pids {
			if err := unix.Kill(pid, unix.SIGKILL); err == nil {
				killed[pid] = true
			} else if !errors.Is(err, unix.ESRCH) {
				return len(killed), fmt.Errorf("realnode: killing process %d: %w", pid, err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RemoveCgroup removes parent's subtree in every hierarchy, deepest first,
// and then top, the first element of parent (e.g. /mooring-lab-1a2b) once
// it is empty. The processes must be gone (KillCgroup).
func RemoveCgroup(parent, top string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, parent), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range slices.Backward(dirs) {
			errs = append(errs, rmdirRetry(d))
		}
		if top != "" {
			if err := unix.Rmdir(filepath.Join(h, top)); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry removes an empty cgroup; a cgroup whose last process has just
// died stays busy for a moment.
func rmdirRetry(dir string) error {
	var err error
	for range 100 {
		if err = unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("realnode: removing cgroup %s: %w", dir, err)
}

// SweepCgroups removes the cgroup trees /<prefix><pid> (e.g.
// /mooring-lab-625) of labs whose process is gone and that hold no process
// in any hierarchy: a lab that was SIGKILLed (a test binary's timeout, a
// crash) never ran its lab down, and its empty tree would stay on the host
// for good. A tree whose PID is alive, or that still holds a process, is
// left alone. It returns the trees removed.
func SweepCgroups(prefix string) ([]string, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	stale := map[string]bool{}
	for _, h := range hs {
		ents, err := os.ReadDir(h)
		if err != nil {
			continue
		}
		for _, e := range ents {
			rest, ok := strings.CutPrefix(e.Name(), prefix)
			pid, perr := strconv.Atoi(rest)
			if !ok || perr != nil || pid <= 0 || !e.IsDir() {
				continue
			}
			if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
				stale["/"+e.Name()] = true
			}
		}
	}
	var removed []string
	var errs []error
	for _, top := range slices.Sorted(maps.Keys(stale)) {
		if pids, err := CgroupPIDs(top); err != nil || len(pids) > 0 {
			continue
		}
		if err := RemoveCgroup(top, ""); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, top)
	}
	return removed, errors.Join(errs...)
}
