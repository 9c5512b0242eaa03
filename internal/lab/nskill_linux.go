package lab

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// nsID identifies a network namespace: the device and inode of its nsfs
// file, as /proc/<pid>/ns/net shows them.
type nsID struct{ dev, ino uint64 }

func nsOfFD(fd int) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nsID{}, err
	}
	return nsID{st.Dev, st.Ino}, nil
}

// pidsInNetNS lists the processes whose (main thread's) network namespace
// is ns, except this process. Exited processes and zombies have no
// namespace left and are not listed.
func pidsInNetNS(ns nsID) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name()+"/ns/net", &st) != nil {
			continue
		}
		if (nsID{st.Dev, st.Ino}) == ns {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// killNetNS SIGKILLs every process living in ns, whoever started it (a
// third-party announcer run with `lab exec` dies like the node's own
// processes), again until none is left, for at most limit. It returns
// how many it killed.
func killNetNS(ns nsID, limit time.Duration) (int, error) {
	killed := map[int]bool{}
	deadline := time.Now().Add(limit)
	for {
		pids, err := pidsInNetNS(ns)
		if err != nil {
			return len(killed), err
		}
		if len(pids) == 0 {
			return len(killed), nil
		}
		if time.Now().After(deadline) {
			return len(killed), fmt.Errorf("lab: processes %v still in the namespace %v after SIGKILL", pids, limit)
		}
		for _, pid := range pids {
			if err := unix.Kill(pid, unix.SIGKILL); err == nil {
				killed[pid] = true
			} else if !errors.Is(err, unix.ESRCH) {
				return len(killed), fmt.Errorf("lab: killing process %d: %w", pid, err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}
