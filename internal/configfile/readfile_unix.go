//go:build unix

package configfile

import "syscall"

// openNonBlocking opens a named pipe without waiting for a writer.
const openNonBlocking = syscall.O_NONBLOCK
