// Command gohello is the latency benchmark's floor for a static Go
// program: the Go runtime's start and exit, nothing else.
package main

func main() {}
