package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/daemon"
	"gpud.dev/gpud/internal/testutil"
)

// TestMain removes the gpud binary the end-to-end tests built, if any.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// gpudBinary builds the real gpud binary once per test process (static,
// as the daemon's tests build it, so the build cache is shared).
func gpudBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "gpud-cli-test-"); binErr == nil {
			binPath, binErr = testutil.BuildStaticGpud(binDir)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// binResult is what one run of the binary printed and its exit code.
type binResult struct {
	stdout, stderr string
	code           int
}

// gpud runs the real binary with args, with the test's environment
// (GPUD_SERVER, GPUD_TOKEN, GPUD_HOME from serveForCLI) plus env, and
// stdin not a terminal.
func gpud(t *testing.T, env []string, args ...string) binResult {
	t.Helper()
	cmd := exec.Command(gpudBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("gpud %s: %v", strings.Join(args, " "), err)
	}
	return binResult{out.String(), errOut.String(), code}
}

// want fails the test unless r exited with code and stderr (or stdout,
// for code 0) holds every one of texts.
func (r binResult) want(t *testing.T, what string, code int, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if !strings.Contains(r.stdout+r.stderr, s) {
			t.Errorf("%s: output lacks %q\nstdout: %s\nstderr: %s", what, s, r.stdout, r.stderr)
		}
	}
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
}

// TestProjectUserAndMemberCommands drives gpud user, gpud project and
// gpud project member on the real binary against a real server: tokens
// printed once on stdout, tables and --json, and the errors a user meets
// (unknown project, missing or unknown role, flags after the arguments,
// a member added twice, a role above the caller's own, a non-admin
// deleting a project, a rotated token that stopped working).
func TestProjectUserAndMemberCommands(t *testing.T) {
	serveForCLI(t, daemon.Options{NoLocalAgent: true})
	as := func(token string) []string { return []string{"GPUD_TOKEN=" + token} }

	r := gpud(t, nil, "user", "create", "alice")
	r.want(t, "user create alice", 0, "shown this once")
	alice := strings.TrimSpace(r.stdout)
	if strings.Count(r.stdout, "\n") != 1 || len(alice) < 20 {
		t.Fatalf("user create: stdout %q, want the token alone", r.stdout)
	}
	r = gpud(t, nil, "user", "create", "--json", "bob")
	r.want(t, "user create --json bob", 0)
	var bob api.UserToken
	if err := json.Unmarshal([]byte(r.stdout), &bob); err != nil || bob.Token == "" || bob.User.Role != "user" {
		t.Fatalf("user create --json: %q %v", r.stdout, err)
	}
	gpud(t, nil, "user", "create", "--global-admin", "ops").want(t, "user create --global-admin", 0)
	gpud(t, nil, "user", "create", "alice").want(t, "user create of an existing user", 1, `user "alice" exists`)
	r = gpud(t, nil, "user", "list", "--json")
	var users []api.User
	if err := json.Unmarshal([]byte(r.stdout), &users); err != nil || len(users) != 4 {
		t.Fatalf("user list --json: %q %v", r.stdout, err)
	}
	gpud(t, nil, "user", "list").want(t, "user list", 0, "NAME", "GLOBAL ROLE", "alice", "ops", "admin")
	gpud(t, as(alice), "user", "list").want(t, "user list as a plain user", 1, "forbidden")

	gpud(t, nil, "project", "create", "lab").want(t, "project create", 0, "project lab created; you are its admin")
	gpud(t, nil, "project", "list").want(t, "project list", 0, "lab", "admin")
	gpud(t, as(alice), "project", "create", "mine").want(t, "project create as a plain user", 1, "forbidden")

	m := "project member "
	cmd := func(s string) []string { return strings.Fields(s) }
	gpud(t, nil, cmd(m+"add lab alice")...).want(t, "member add", 0, "alice is a user of project lab")
	gpud(t, nil, cmd(m+"add lab alice")...).want(t, "member add twice", 1, "already a member of lab, as user", "set-role")
	gpud(t, nil, cmd(m+"add lab bob --role manager")...).want(t, "flag after the arguments", 2, "put flags before", "gpud project member add --role manager lab bob")
	gpud(t, nil, cmd(m+"add --role boss lab bob")...).want(t, "unknown role", 2, `--role "boss": use user, manager or admin`)
	gpud(t, nil, cmd(m+"add --role manager nope bob")...).want(t, "unknown project", 1, `project "nope" not found`)
	gpud(t, nil, cmd(m+"add --role manager lab nobody")...).want(t, "unknown user", 1, `user "nobody" not found`)
	gpud(t, nil, cmd(m+"add lab")...).want(t, "missing user", 2, "give PROJECT and USER")
	gpud(t, nil, cmd(m+"add --role manager lab bob")...).want(t, "member add --role", 0, "bob is a manager of project lab")
	gpud(t, nil, cmd(m+"set-role lab alice")...).want(t, "set-role without a role", 2, "give the new role", "--role manager lab alice")
	gpud(t, nil, cmd(m+"set-role --role manager lab ops")...).want(t, "set-role of a non-member", 1, "ops is not a member of lab", "member add")
	// The server's refusals, shown as they are: a manager grants no role
	// above its own, a user manages no members, only global admins
	// delete projects.
	gpud(t, as(bob.Token), cmd(m+"set-role --role admin lab alice")...).want(t, "manager grants admin", 1, `you cannot grant admin: your role in project "lab" is manager`)
	gpud(t, as(alice), cmd(m+"add lab ops")...).want(t, "user adds a member", 1, "forbidden")
	gpud(t, as(bob.Token), "project", "delete", "lab").want(t, "a manager deletes the project", 1, "forbidden")
	gpud(t, as(bob.Token), cmd(m+"set-role --role user lab alice")...).want(t, "manager sets a user's role", 0, "alice is a user of project lab")

	r = gpud(t, as(alice), cmd(m+"list --json lab")...)
	var members []api.Member
	if err := json.Unmarshal([]byte(r.stdout), &members); err != nil || len(members) != 3 {
		t.Fatalf("member list --json as a member: %q %v", r.stdout, err)
	}
	gpud(t, nil, cmd(m+"list lab")...).want(t, "member list", 0, "USER", "ROLE", "alice", "bob", "manager")
	gpud(t, nil, cmd(m+"remove lab alice")...).want(t, "member remove", 0, "alice removed from project lab")
	gpud(t, nil, cmd(m+"remove lab alice")...).want(t, "member remove twice", 1, "alice is not a member of lab")
	gpud(t, as(alice), "project", "list").want(t, "project list of a user in no project", 0, "no projects")

	// Rotating: the new token is printed once, the old one gets 401.
	r = gpud(t, as(alice), "user", "token")
	r.want(t, "user token (self)", 0, "the old one stopped working", "GPUD_TOKEN holds the old token")
	alice2 := strings.TrimSpace(r.stdout)
	if alice2 == alice || len(alice2) < 20 {
		t.Fatalf("user token: stdout %q, want a new token", r.stdout)
	}
	gpud(t, as(alice), "project", "list").want(t, "the old token", 1, "unauthorized")
	gpud(t, as(alice2), "project", "list").want(t, "the new token", 0)
	gpud(t, as(alice2), "user", "token", "bob").want(t, "a user rotates another's token", 1, `user "bob" not found`)
	r = gpud(t, nil, "user", "token", "--json", "alice")
	var ut api.UserToken
	if err := json.Unmarshal([]byte(r.stdout), &ut); err != nil || ut.User.Name != "alice" || ut.Token == alice2 {
		t.Fatalf("user token --json alice: %q %v", r.stdout, err)
	}

	gpud(t, nil, "user", "delete", "bob").want(t, "user delete", 0, "user bob deleted")
	gpud(t, nil, "user", "delete", "bob").want(t, "user delete twice", 1, `user "bob" not found`)
	gpud(t, nil, "project", "delete", "nope").want(t, "delete of an unknown project", 1, `project "nope" not found`)
	gpud(t, nil, "project", "delete", "lab").want(t, "project delete", 0, "project lab deleted")
	if r := gpud(t, nil, "project", "list", "--json"); strings.Contains(r.stdout, `"lab"`) {
		t.Errorf("project list after delete: %s", r.stdout)
	}
}

// TestCompletionScripts: gpud completion prints a script for bash, zsh
// and fish; the binary answers --generate-bash-completion with its
// commands and a command's subcommands and flags; and the bash script,
// loaded in a real bash, completes gpud's words.
func TestCompletionScripts(t *testing.T) {
	serveForCLI(t, daemon.Options{NoLocalAgent: true})
	for shell, want := range map[string]string{
		"bash": "complete -o bashdefault -o default -F _gpud_complete gpud",
		"zsh":  "compdef _gpud gpud",
		"fish": "complete -r -c gpud -n '__fish_gpud_no_subcommand' -a 'project'",
	} {
		gpud(t, nil, "completion", shell).want(t, "completion "+shell, 0, want)
	}
	gpud(t, nil, "completion", "tcsh").want(t, "completion tcsh", 2, `"tcsh": give bash, zsh or fish`)
	gpud(t, nil, "completion").want(t, "completion without a shell", 2, "give exactly one shell")

	lines := func(args ...string) []string {
		t.Helper()
		r := gpud(t, nil, append(args, "--generate-bash-completion")...)
		r.want(t, strings.Join(args, " ")+" --generate-bash-completion", 0)
		return strings.Fields(r.stdout)
	}
	has := func(what string, got []string, want ...string) {
		t.Helper()
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || g == w
			}
			if !found {
				t.Errorf("%s: completions %v lack %q", what, got, w)
			}
		}
	}
	has("gpud", lines(), "run", "ps", "project", "user", "delete", "completion", "secret")
	has("gpud project", lines("project"), "list", "create", "delete", "member")
	has("gpud project member", lines("project", "member"), "list", "add", "set-role", "remove")
	has("gpud user", lines("user"), "list", "create", "delete", "token")
	has("gpud user create -", lines("user", "create", "-"), "--global-admin", "--json")
	has("gpud delete --a", lines("delete", "--a"), "--all-finished")

	// The script itself, in bash, with gpud on PATH.
	script := filepath.Join(t.TempDir(), "gpud.bash")
	writeTestFile(t, script, gpud(t, nil, "completion", "bash").stdout)
	complete := func(words ...string) string {
		t.Helper()
		c := exec.Command("bash", "--norc", "--noprofile", "-c", fmt.Sprintf(
			`source %q; COMP_WORDS=(%s); COMP_CWORD=%d; _gpud_complete; echo "${COMPREPLY[*]}"`,
			script, quoteWords(words), len(words)-1))
		c.Env = append(os.Environ(), "PATH="+filepath.Dir(gpudBinary(t))+":"+os.Getenv("PATH"))
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("bash completion of %v: %v: %s", words, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := complete("gpud", "proj"); got != "project" {
		t.Errorf("bash completes gpud proj as %q, want project", got)
	}
	if got := complete("gpud", "project", "member", "se"); got != "set-role" {
		t.Errorf("bash completes gpud project member se as %q, want set-role", got)
	}
	if got := complete("gpud", "user", "create", "--glo"); got != "--global-admin" {
		t.Errorf("bash completes gpud user create --glo as %q, want --global-admin", got)
	}
	if got := complete("gpud", "user", "create", "--"); !strings.Contains(got, "--global-admin") || !strings.Contains(got, "--json") {
		t.Errorf("bash completes gpud user create -- as %q, want its flags", got)
	}
	// After --, urfave/cli would run the command: the script asks nothing.
	if got := complete("gpud", "delete", "--", "x"); got != "" {
		t.Errorf("bash completes after -- as %q, want nothing asked", got)
	}
	// A word is an argument, never evaluated.
	marker := filepath.Join(t.TempDir(), "ran")
	complete("gpud", "$(touch "+marker+")", "")
	if _, err := os.Stat(marker); err == nil {
		t.Error("the bash completion ran a command substitution it was given as a word")
	}
}

// quoteWords writes words as a bash array's single-quoted elements.
func quoteWords(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
