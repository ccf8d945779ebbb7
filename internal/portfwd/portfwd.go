// Package portfwd forwards local ports for `gpud attach`: raw TCP to a
// job's published port, or HTTP to a service through the server's proxy
// with the user's bearer token added. It serves until its context ends.
//
// portfwd must not import any gpud package but api.
package portfwd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// TCP accepts connections on l and pipes each to target until ctx ends.
// It closes l when it returns. A connection whose target cannot be dialed
// is closed at once; the error goes to onError (may be nil).
func TCP(ctx context.Context, l net.Listener, target string, onError func(error)) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	defer l.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("forward to %s: accept: %w", target, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pipe(ctx, conn, target, onError)
		}()
	}
}

// pipe copies both ways between conn and a new connection to target.
func pipe(ctx context.Context, conn net.Conn, target string, onError func(error)) {
	defer conn.Close()
	d := net.Dialer{Timeout: 10 * time.Second}
	up, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		if onError != nil {
			onError(fmt.Errorf("forward to %s: %w", target, err))
		}
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close(); up.Close() })
	defer stop()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(up, conn)
	go cp(conn, up)
	<-done
	<-done
}

// HTTP serves l as a reverse proxy to base (a URL prefix such as
// http://server/proxy/services/main/web/), adding the bearer token to
// every request, until ctx ends. Responses are streamed, not buffered.
func HTTP(ctx context.Context, l net.Listener, base, token string) error {
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("proxy base %q: %w", base, err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = u.Host
			if token != "" {
				r.Out.Header.Set("Authorization", "Bearer "+token)
			}
		},
		FlushInterval: -1,
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	defer stop()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("proxy to %s: %w", base, err)
	}
	return nil
}
