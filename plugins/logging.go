package plugins

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rs/zerolog"
)

// go-plugin logs through hclog, gpud through zerolog. On the server's side
// hclogAdapter is the hclog.Logger go-plugin writes to (its own messages and
// every line of a plugin's stderr), re-logged to the server's zerolog with
// the plugin's name; on the plugin's side hclogWriter turns the backend's
// zerolog events into the hclog JSON lines go-plugin parses, so a plugin's
// levels and fields survive the trip.

// hclogAdapter is an hclog.Logger over a zerolog.Logger.
type hclogAdapter struct {
	log   zerolog.Logger
	name  string
	args  []any
	level hclog.Level
}

// newHclog adapts log for go-plugin; debug and trace lines go through only
// when log's level lets them.
func newHclog(log zerolog.Logger) hclog.Logger {
	level := hclog.Info
	if log.GetLevel() <= zerolog.DebugLevel {
		level = hclog.Debug
	}
	return &hclogAdapter{log: log, level: level}
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level < a.level || level == hclog.Off {
		return
	}
	var ev *zerolog.Event
	switch level {
	case hclog.Trace, hclog.Debug, hclog.NoLevel:
		ev = a.log.Debug()
	case hclog.Info:
		ev = a.log.Info()
	case hclog.Warn:
		ev = a.log.Warn()
	default:
		ev = a.log.Error()
	}
	if a.name != "" {
		ev = ev.Str("logger", a.name)
	}
	all := append(append([]any{}, a.args...), args...)
	for i := 0; i+1 < len(all); i += 2 {
		key := fmt.Sprint(all[i])
		if key == "timestamp" {
			continue // the plugin's own clock: the server stamps its line
		}
		ev = ev.Interface(key, all[i+1])
	}
	ev.Msg(msg)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }
func (a *hclogAdapter) IsTrace() bool                 { return a.level <= hclog.Trace }
func (a *hclogAdapter) IsDebug() bool                 { return a.level <= hclog.Debug }
func (a *hclogAdapter) IsInfo() bool                  { return a.level <= hclog.Info }
func (a *hclogAdapter) IsWarn() bool                  { return a.level <= hclog.Warn }
func (a *hclogAdapter) IsError() bool                 { return a.level <= hclog.Error }
func (a *hclogAdapter) ImpliedArgs() []any            { return a.args }
func (a *hclogAdapter) Name() string                  { return a.name }
func (a *hclogAdapter) SetLevel(level hclog.Level)    { a.level = level }
func (a *hclogAdapter) GetLevel() hclog.Level         { return a.level }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	c := *a
	c.args = append(append([]any{}, a.args...), args...)
	return &c
}

func (a *hclogAdapter) Named(name string) hclog.Logger {
	c := *a
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	return &c
}

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return zerologLineWriter{a}
}

// zerologLineWriter logs each write as one info line.
type zerologLineWriter struct{ a *hclogAdapter }

func (w zerologLineWriter) Write(p []byte) (int, error) {
	w.a.Info(string(p))
	return len(p), nil
}

// hclogWriter rewrites zerolog's JSON events as hclog's (@level, @message,
// @timestamp) on w, the plugin's stderr.
type hclogWriter struct{ w io.Writer }

func (h hclogWriter) Write(p []byte) (int, error) {
	var ev map[string]any
	if err := json.Unmarshal(p, &ev); err != nil {
		return h.w.Write(p) // not an event: goes through as a debug line
	}
	for from, to := range map[string]string{zerolog.LevelFieldName: "@level", zerolog.MessageFieldName: "@message"} {
		if v, ok := ev[from]; ok {
			ev[to] = v
			delete(ev, from)
		}
	}
	delete(ev, zerolog.TimestampFieldName)
	ev["@timestamp"] = time.Now().Format("2006-01-02T15:04:05.000000Z07:00")
	if _, ok := ev["@message"]; !ok {
		ev["@message"] = ""
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return 0, err
	}
	if _, err := h.w.Write(append(b, '\n')); err != nil {
		return 0, err
	}
	return len(p), nil
}
