package upstream

import (
	"net"
	"syscall"
)

// quiet reports whether nothing arrived on an idle connection: no byte
// and no end. One non-blocking peek at the socket (recv with MSG_PEEK),
// which is what http.Transport's reader goroutine per connection finds out
// by waiting.
func quiet(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	idle := true
	var b [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		idle = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true
	})
	return idle
}
