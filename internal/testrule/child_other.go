//go:build !linux

package testrule

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
