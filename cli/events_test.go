package cli

import (
	"testing"

	"gpud.dev/gpud/api"
)

func TestEventSubjectsUseRunNames(t *testing.T) {
	idx := runNameIndex{"d7c8322ef11eb742": "sleeper"}
	tests := []struct {
		e    api.Event
		want string
	}{
		{api.Event{Kind: "runs", Subject: "d7c8322ef11eb742"}, "sleeper"},
		{api.Event{Kind: "jobs", Subject: "d7c8322ef11eb742-0-1"}, "sleeper-0-1"},
		{api.Event{Kind: "jobs", Subject: "unknown-0-0"}, "unknown-0-0"},
		{api.Event{Kind: "instances", Subject: "d7c8322ef11eb742"}, "d7c8322ef11eb742"},
	}
	for _, tt := range tests {
		if got := idx.subject(tt.e); got != tt.want {
			t.Errorf("subject(%+v) = %q, want %q", tt.e, got, tt.want)
		}
	}
}
