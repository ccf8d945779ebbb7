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

	// The callbacks and their arguments and results, made once per
	// connection (a closure per call would be an allocation per call).
	// The read side and the write side are apart: a hijacked connection
	// may be read and written from two goroutines.
	readFn, writeFn, sendFn func(fd uintptr) bool
	rp, wp                  []byte
	rn, wn                  int
	rerrno, werrno          syscall.Errno
	sent                    bool
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
	r := &rawIO{raw: raw, conn: c}
	r.readFn, r.writeFn, r.sendFn = r.readCallback, r.writeCallback, r.sendCallback
	return r
}

func (r *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.rp, r.rn, r.rerrno = p, 0, 0
	err := r.raw.Read(r.readFn)
	n, errno := r.rn, r.rerrno
	r.rp = nil
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

func (r *rawIO) readCallback(fd uintptr) bool {
	for {
		r1, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&r.rp[0])), uintptr(len(r.rp)))
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false // wait in the netpoller
		}
		r.rn, r.rerrno = int(r1), e
		return true
	}
}

func (r *rawIO) Write(p []byte) (int, error) {
	r.wp, r.wn, r.werrno = p, 0, 0
	err := r.raw.Write(r.writeFn)
	n, errno := r.wn, r.werrno
	r.wp = nil
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, os.NewSyscallError("write", errno)
	}
	return n, nil
}

// writeCallback writes r.wp from r.wn on; false: the socket's buffer is
// full, wait.
func (r *rawIO) writeCallback(fd uintptr) bool {
	for r.wn < len(r.wp) {
		// sendto with MSG_NOSIGNAL: a closed peer is EPIPE, never SIGPIPE.
		r1, _, e := unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&r.wp[r.wn])), uintptr(len(r.wp)-r.wn), unix.MSG_NOSIGNAL, 0, 0)
		switch e {
		case 0:
			r.wn += int(r1)
			continue
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		r.werrno = e
		return true
	}
	return true
}

// sendThenWait writes b and waits until the connection is readable (an
// answer, or the peer's close), without the read that a Go read makes
// first and that finds nothing on a request just sent (EAGAIN): the
// write happens inside the read's callback, after the netpoller cleared
// the socket's readiness, so the answer's arrival cannot be missed. n is
// what was written; with n < len(b) and no error the socket's buffer was
// full and the caller writes the rest itself.
func (r *rawIO) sendThenWait(b []byte) (int, error) {
	r.wp, r.wn, r.werrno, r.sent = b, 0, 0, false
	err := r.raw.Read(r.sendFn)
	n, errno := r.wn, r.werrno
	r.wp = nil
	if err == nil && errno != 0 {
		err = os.NewSyscallError("sendto", errno)
	}
	return n, err
}

func (r *rawIO) sendCallback(fd uintptr) bool {
	if r.sent {
		return true // readable
	}
	r.sent = true
	for r.wn < len(r.wp) {
		r1, _, e := unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&r.wp[r.wn])), uintptr(len(r.wp)-r.wn), unix.MSG_NOSIGNAL, 0, 0)
		switch e {
		case 0:
			r.wn += int(r1)
			continue
		case unix.EINTR:
			continue
		case unix.EAGAIN:
		default:
			r.werrno = e
		}
		return true // the caller writes the rest, or fails
	}
	return len(r.wp) == 0 // all sent: wait for the answer
}

// peekEmpty says whether a socket has nothing to read and is not closed
// (a MSG_PEEK receive finds EAGAIN), with a raw system call (see rawIO).
func peekEmpty(fd uintptr) bool {
	var b [1]byte
	_, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	return e == unix.EAGAIN
}
