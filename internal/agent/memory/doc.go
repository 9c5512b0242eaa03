// Package memory keeps the agent's resident memory small: the garbage
// collector's target (GOGC 50 unless set) and, once after start-up, the
// release of what start-up left behind (the freed heap and the binary's
// clean code pages only package initialisation touched); and it reports
// a soft memory limit the heap presses on (LimitWatch). Figures:
// docs/benchmarks.md, "The agent's memory".
//
// It may import the standard library, golang.org/x/sys, k8s.io/utils
// (the clock) and prometheus; nothing of the agent.
package memory
