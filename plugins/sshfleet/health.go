package sshfleet

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Health defaults: a silent host is declared unreachable within
// DefaultUnreachableAfter + DefaultKeepaliveInterval (25 s).
const (
	DefaultKeepaliveInterval = 5 * time.Second
	DefaultUnreachableAfter  = 20 * time.Second
)

// Health is a host's reachability as the server sees it.
type Health string

// Health values.
const (
	Reachable   Health = "reachable"
	Unreachable Health = "unreachable"
)

// HealthConfig bounds failure detection.
type HealthConfig struct {
	// KeepaliveInterval is how often a keepalive request is sent; each one
	// waits at most this long for its answer.
	KeepaliveInterval time.Duration
	// UnreachableAfter is how long a host may stay silent before it is
	// declared unreachable. Detection takes at most UnreachableAfter +
	// KeepaliveInterval.
	UnreachableAfter time.Duration
}

func (c HealthConfig) withDefaults() HealthConfig {
	if c.KeepaliveInterval <= 0 {
		c.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if c.UnreachableAfter <= 0 {
		c.UnreachableAfter = DefaultUnreachableAfter
	}
	return c
}

// errNoAnswer marks a keepalive that timed out (the host may yet answer),
// unlike a closed connection, which is known dead at once.
var errNoAnswer = errors.New("no answer")

// Ping sends one SSH keepalive request and waits up to timeout for the
// answer. A host whose connection was closed returns ErrUnreachable.
func (h *Host) Ping(ctx context.Context, timeout time.Duration) error {
	c := h.sshClient()
	if c == nil {
		return fmt.Errorf("host %s: %w", h.Target.Name, ErrUnreachable)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := c.SendRequest("keepalive@openssh.com", true, nil)
		done <- err
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("host %s: keepalive: %w", h.Target.Name, err)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("host %s: keepalive: %w within %s", h.Target.Name, errNoAnswer, timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Reconnect dials the host again and, when the agent answers through the
// new connection, makes it the host's connection. The agent itself kept
// running under its supervisor; nothing is reinstalled.
func (h *Host) Reconnect(ctx context.Context) error {
	c, err := h.dialer.Dial(ctx, h.Target)
	if err != nil {
		return err
	}
	if old := h.swapClient(c); old != nil {
		old.Close()
	}
	var info = h.Info
	if err := h.getJSON(ctx, h.HTTPClient(), "/api/v1/host", &info); err != nil {
		h.markDown()
		return fmt.Errorf("host %s: reconnected but the agent did not answer: %w", h.Target.Name, err)
	}
	return nil
}

// markDown drops the connection so requests fail fast with ErrUnreachable.
func (h *Host) markDown() {
	if c := h.swapClient(nil); c != nil {
		c.Close()
	}
}

// Monitor watches the host until ctx ends: a keepalive every interval; a
// host silent for UnreachableAfter is marked unreachable (its connection
// closed, so in-flight agent calls fail) and onChange is called; then it
// redials every interval and calls onChange again once the agent answers.
// onChange runs on Monitor's goroutine; it must not block for long.
func (h *Host) Monitor(ctx context.Context, cfg HealthConfig, onChange func(Health, error)) {
	cfg = cfg.withDefaults()
	lastOK := time.Now()
	state := Reachable
	tick := time.NewTicker(cfg.KeepaliveInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if state == Reachable {
			err := h.Ping(ctx, cfg.KeepaliveInterval)
			if err == nil {
				lastOK = time.Now()
				continue
			}
			if ctx.Err() != nil {
				return
			}
			// A closed connection (EOF) is known dead at once.
			if errors.Is(err, errNoAnswer) && time.Since(lastOK) < cfg.UnreachableAfter {
				h.log.Debug().Err(err).Msg("keepalive missed")
				continue
			}
			h.markDown()
			state = Unreachable
			h.log.Warn().Err(err).Dur("silent", time.Since(lastOK)).Msg("host unreachable")
			onChange(Unreachable, err)
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, cfg.KeepaliveInterval)
		err := h.Reconnect(dctx)
		cancel()
		if errors.Is(err, ErrHostKeyChanged) {
			h.log.Error().Err(err).Msg("refusing to reconnect")
			continue
		}
		if err != nil {
			h.log.Debug().Err(err).Msg("reconnect failed")
			continue
		}
		state, lastOK = Reachable, time.Now()
		h.log.Info().Msg("host reachable again")
		onChange(Reachable, nil)
	}
}
