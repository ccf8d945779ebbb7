package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSSHConfigReplacesOnlyItsRunsHostEntry: writing a run's entry again
// replaces that entry and keeps every other host's, in place.
func TestSSHConfigReplacesOnlyItsRunsHostEntry(t *testing.T) {
	config := "Host a\n    User old\nHost b\n    User keep\n"
	got := replaceHost(config, "a", "Host a\n    User new\n")
	if want := "Host a\n    User new\nHost b\n    User keep\n"; got != want {
		t.Fatalf("replace a:\n%s\nwant:\n%s", got, want)
	}
	got = replaceHost(got, "c", "Host c\n    User added\n")
	if !strings.HasSuffix(got, "Host c\n    User added\n") || !strings.Contains(got, "Host b\n    User keep\n") {
		t.Fatalf("add c:\n%s", got)
	}
	// "Host ab" is another host, not a.
	if got := replaceHost("Host ab\n    User x\n", "a", "Host a\n"); got != "Host ab\n    User x\nHost a\n" {
		t.Fatalf("a prefix matched another host:\n%s", got)
	}
}

// TestIncludeLineIsAddedOnceAtTheTop: ~/.ssh/config gets the Include at
// its top (where it applies to every host), once, keeping what was there.
func TestIncludeLineIsAddedOnceAtTheTop(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	user := filepath.Join(home, ".ssh", "config")
	if err := os.MkdirAll(filepath.Dir(user), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(user, []byte("Host mine\n    User me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := includeFrom("/x/.gpud/ssh/config"); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(user)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Include /x/.gpud/ssh/config\n\nHost mine\n    User me\n"; string(b) != want {
		t.Fatalf("~/.ssh/config:\n%s\nwant:\n%s", b, want)
	}
}
