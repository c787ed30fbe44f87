package main

import "syscall"

// procAttr puts CMD in its own process group and has the kernel kill it
// should latchctl die (SIGKILL): the lease goes with latchctl's connection.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
