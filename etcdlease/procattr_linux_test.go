package etcdlease_test

import "syscall"

// sysProcAttr makes the kernel kill a test's etcd when the test binary
// dies, so that no server outlives a crashed or killed test run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
