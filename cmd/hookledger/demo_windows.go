//go:build windows

package main

import "syscall"

// WSAEADDRINUSE.
func addrInUse() error { return syscall.Errno(10048) }
