package testrule

import "syscall"

// childAttr makes the kernel kill the child when the watching process dies
// (go test kills a test binary that outlives its timeout by a minute).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
