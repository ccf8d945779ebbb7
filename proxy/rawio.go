package proxy

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawIO reads and writes a socket with raw system calls inside the
// netpoller's RawConn callbacks: the connection still waits for
// readiness, deadlines and Close as any net.Conn, but a read or write
// does not enter the runtime's syscall state. That state change is what
// wakes Go's sysmon thread whenever the process had gone idle, which on
// a proxy that goes idle between requests is every request: a futex
// wake-up, and sysmon's own sleeps, per request. Reads and writes of a
// non-blocking socket do not block (EAGAIN waits in the netpoller), so
// nothing needs the scheduler's hand-off of a blocked thread.
type rawIO struct {
	raw  syscall.RawConn
	conn net.Conn
}

// newRawIO returns a rawIO for c, or nil when c is no socket.
func newRawIO(c net.Conn) *rawIO {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	if _, isTCP := c.(*net.TCPConn); !isTCP {
		if _, isUnix := c.(*net.UnixConn); !isUnix {
			return nil
		}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return &rawIO{raw: raw, conn: c}
}

func (r *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := r.raw.Read(func(fd uintptr) bool {
		for {
			r1, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // wait in the netpoller
			}
			n, errno = int(r1), e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (r *rawIO) Write(p []byte) (int, error) {
	written := 0
	var errno syscall.Errno
	err := r.raw.Write(func(fd uintptr) bool {
		for written < len(p) {
			// sendto with MSG_NOSIGNAL: a closed peer is EPIPE, never SIGPIPE.
			r1, _, e := unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&p[written])), uintptr(len(p)-written), unix.MSG_NOSIGNAL, 0, 0)
			switch e {
			case 0:
				written += int(r1)
				continue
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // the socket's buffer is full: wait
			}
			errno = e
			return true
		}
		return true
	})
	switch {
	case err != nil:
		return written, err
	case errno != 0:
		return written, os.NewSyscallError("write", errno)
	}
	return written, nil
}

// sendThenWait writes b and waits until the connection is readable (an
// answer, or the peer's close), without the read that a Go read makes
// first and that finds nothing on a request just sent (EAGAIN): the
// write happens inside the read's callback, after the netpoller cleared
// the socket's readiness, so the answer's arrival cannot be missed. n is
// what was written; with n < len(b) and no error the socket's buffer was
// full and the caller writes the rest itself.
func (r *rawIO) sendThenWait(b []byte) (n int, err error) {
	var errno syscall.Errno
	sent, stop := false, false
	err = r.raw.Read(func(fd uintptr) bool {
		if sent {
			return true // readable
		}
		sent = true
		for n < len(b) {
			r1, _, e := unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&b[n])), uintptr(len(b)-n), unix.MSG_NOSIGNAL, 0, 0)
			switch e {
			case 0:
				n += int(r1)
				continue
			case unix.EINTR:
				continue
			case unix.EAGAIN:
			default:
				errno = e
			}
			stop = true
			return true
		}
		return len(b) == 0
	})
	if err == nil && errno != 0 {
		err = os.NewSyscallError("sendto", errno)
	}
	_ = stop
	return n, err
}

// peekEmpty says whether a socket has nothing to read and is not closed
// (a MSG_PEEK receive finds EAGAIN), with a raw system call (see rawIO).
func peekEmpty(fd uintptr) bool {
	var b [1]byte
	_, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	return e == unix.EAGAIN
}
