//go:build unix

package untar

import "syscall"

const noFollow = syscall.O_NOFOLLOW
