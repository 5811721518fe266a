//go:build !windows

package main

import "syscall"

func addrInUse() error { return syscall.EADDRINUSE }
