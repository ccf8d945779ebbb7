package daemon

import (
	"bytes"
	"encoding/json"
	"time"

	"gpud.dev/gpud/api"
)

// storedLine is one log entry as kept in the store's log files: one JSON
// object per record (NDJSON), in the order the agent sent them. The first
// field is the time, so logPosition can read it without decoding the line.
type storedLine struct {
	T time.Time     `json:"t"`
	S api.LogStream `json:"s"`
	L string        `json:"l"`
	// P marks a piece of a line longer than api.MaxLogLine (LogEntry.Partial).
	P bool `json:"p,omitempty"`
	// D marks a stand-in for output not kept: that many bytes (LogEntry.Dropped).
	D int64 `json:"d,omitempty"`
}

// resumeSlack is how far before the last kept entry a follower resuming
// after a broken agent stream asks the agent to start again. An agent's
// entries are nearly but not strictly in time order (stdout and stderr are
// stamped by two writers); asking from this much earlier makes an entry
// stamped a little before the last kept one arrive again instead of being
// filtered out by the agent, and counting the kept entries in that window
// skips exactly the ones already kept.
const resumeSlack = time.Minute

// recordTime reads the time of a stored record, from its leading field
// when the record has the layout json.Marshal gives storedLine.
func recordTime(rec []byte) (time.Time, error) {
	const prefix = `{"t":"`
	if bytes.HasPrefix(rec, []byte(prefix)) {
		if end := bytes.IndexByte(rec[len(prefix):], '"'); end >= 0 {
			if t, err := time.Parse(time.RFC3339Nano, string(rec[len(prefix):len(prefix)+end])); err == nil {
				return t, nil
			}
		}
	}
	var l storedLine
	err := json.Unmarshal(rec, &l)
	return l.T, err
}
