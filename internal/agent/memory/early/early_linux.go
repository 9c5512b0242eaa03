//go:build linux

// Package early lowers the agent's start-up peak of resident memory
// before the other packages initialise, when the process is the agent
// (argv[1] "agent"). Package initialisation touches pages all over the
// binary, and since Linux 6.18 a fault maps the whole large folio of the
// page cache around the page touched (up to 2 MiB), and a binary just
// written (by the linker, by an image pull) sits in the cache in large
// folios: the agent started with ~50 MiB of the binary resident, its peak
// (VmHWM) until the start-up release returned it. So, first, the
// binary's cached pages no process maps are dropped (POSIX_FADV_DONTNEED;
// other processes' mapped pages stay), and its read-only mappings are
// advised MADV_RANDOM: what initialisation touches is read back in small
// pieces and mapped alone. Cost: the agent's start reads those pages from
// disk (~0.1 s more for `mooring agent --help`). Figures: docs/benchmarks.md,
// "The agent's start-up peak".
//
// It imports bytes, strconv and syscall only: Go initialises a package once its
// imports are, choosing among the ready ones by import path, so this one
// runs before the heavy initialisers (GODEBUG=inittrace=1 shows it 27th of
// ~400, ~1 ms in). Imported for its side effect by cmd/mooring.
package early

import (
	"bytes"
	"strconv"
	"syscall"
)

func init() { adviseRandom() }

// adviseRandom evicts and advises the executable when argv[1] is
// "agent". Every failure leaves the defaults.
func adviseRandom() {
	var cmd [256]byte
	n := readFile("/proc/self/cmdline", cmd[:])
	if !isAgent(cmd[:n]) {
		return
	}
	adviseExe()
}

// adviseExe advises this process's executable mappings MADV_RANDOM,
// drops the executable's unmapped pages from the page cache, and returns
// how many mappings it advised.
func adviseExe() int {
	var exe [4096]byte
	m, err := syscall.Readlink("/proc/self/exe", exe[:])
	if err != nil || m <= 0 {
		return 0
	}
	var maps [64 << 10]byte
	k := readFile("/proc/self/maps", maps[:])
	done := 0
	for _, r := range exeRanges(maps[:k], exe[:m]) {
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, r[0], r[1]-r[0], syscall.MADV_RANDOM); errno == 0 {
			done++
		}
	}
	if fd, err := syscall.Open(string(exe[:m]), syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err == nil {
		_, _, _ = syscall.Syscall6(syscall.SYS_FADVISE64, uintptr(fd), 0, 0, 4, 0, 0) // POSIX_FADV_DONTNEED
		syscall.Close(fd)
	}
	return done
}

// readFile reads up to len(buf) bytes of path.
func readFile(path string, buf []byte) int {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer syscall.Close(fd)
	n := 0
	for n < len(buf) {
		k, err := syscall.Read(fd, buf[n:])
		if err != nil || k <= 0 {
			break
		}
		n += k
	}
	return n
}

// isAgent reports whether a NUL-separated command line's second word is
// "agent".
func isAgent(cmdline []byte) bool {
	_, rest, _ := bytes.Cut(cmdline, []byte{0})
	return bytes.HasPrefix(rest, []byte("agent\x00"))
}

// exeRanges returns the r-xp and r--p mappings of exe in a maps file:
// "00400000-016c9000 r-xp 00000000 08:01 123   /usr/bin/mooring". It
// parses the maps header as memory.cleanExeMappings parses smaps; that
// one cannot be used here (package memory's imports initialise late).
func exeRanges(maps, exe []byte) [][2]uintptr {
	var out [][2]uintptr
	for _, line := range bytes.Split(maps, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) < 6 || !bytes.Equal(bytes.Join(f[5:], []byte(" ")), exe) || (string(f[1]) != "r-xp" && string(f[1]) != "r--p") {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		if ok && err1 == nil && err2 == nil && end > start {
			out = append(out, [2]uintptr{uintptr(start), uintptr(end)})
		}
	}
	return out
}
