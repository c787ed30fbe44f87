package main

import "syscall"

// procAttr puts CMD in its own process group and, should latchctl die
// without a chance to stop it (SIGKILL), has the kernel kill it: the
// server releases the lease when latchctl's connection closes, so CMD
// must not run on unprotected.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
