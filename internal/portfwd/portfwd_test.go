package portfwd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestTCPForwardsBothWaysUntilCancelled(t *testing.T) {
	echo := listen(t)
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	local := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- TCP(ctx, local, echo.Addr().String(), nil) }()

	for i := range 3 {
		c, err := net.Dial("tcp", local.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("ping %d\n", i)
		fmt.Fprint(c, msg)
		got, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || got != msg {
			t.Fatalf("connection %d: got %q, %v; want %q echoed through the forward", i, got, err, msg)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("TCP returned %v after cancel, want nil", err)
	}
	if _, err := net.Dial("tcp", local.Addr().String()); err == nil {
		t.Fatal("the local port still accepts after cancel")
	}
}

func TestHTTPAddsTokenAndKeepsPathUnderPrefix(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", r.Header.Get("Authorization"), r.URL.Path)
	}))
	defer upstream.Close()
	local := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = HTTP(ctx, local, upstream.URL+"/proxy/services/main/web/", "tok") }()
	resp, err := http.Get("http://" + local.Addr().String() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := "Bearer tok /proxy/services/main/web/v1/models"; string(b) != want {
		t.Fatalf("upstream saw %q, want %q", b, want)
	}
}
