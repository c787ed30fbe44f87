//go:build !linux

package main

import "syscall"

// procAttr puts CMD in its own process group. Outside Linux there is no
// parent-death signal: if latchctl is killed with SIGKILL, CMD runs on.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
