//go:build !linux

package realnode

import (
	"context"
	"errors"
	"time"
)

var errLinux = errors.New("realnode: real nodes need Linux")

// Host is the shared host-wide state (Linux only).
type Host struct {
	ID  string
	PID int
}

// KernelDefaults are the sysctls a kubelet insists on (Linux only).
var KernelDefaults = map[string]string{}

func (Host) Acquire([]string) error                    { return errLinux }
func (Host) Release() error                            { return errLinux }
func ReadSysctls() (map[string]string, error)          { return nil, errLinux }
func CreateCgroup(string) error                        { return errLinux }
func CgroupPIDs(string) ([]int, error)                 { return nil, errLinux }
func KillCgroup(string, time.Duration) (int, error)    { return 0, errLinux }
func RemoveCgroup(string, string) error                { return errLinux }
func HoldMounts(context.Context, []Bind, string) error { return errLinux }
