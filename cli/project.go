package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
)

// projectCommand manages projects and their members through the API
// (users, projects and members: api/routes.go). The project is an
// argument here, not --project: these commands act on projects.
func projectCommand() *cli.Command {
	return &cli.Command{
		Name:  "project",
		Usage: "list, create and delete projects; add, change and remove their members",
		Description: `A project holds runs, fleets, queues, volumes, gateways, backends and secrets; its members
hold one of three roles: user (submit and manage runs), manager (also fleets, queues, gateways,
secrets, members up to manager), admin (also backends, members up to admin). Global admins
create and delete projects and hold every role in each.

Examples:
   gpud project list
   gpud project create research
   gpud project member add --role manager research alice
   gpud project member list research
   gpud project delete research`,
		Subcommands: []*cli.Command{
			{
				Name:      "list",
				Usage:     "list your projects and your role in each (every project for global admins)",
				UsageText: "gpud project list [--json]",
				Flags:     serverFlags(jsonFlag()),
				Action:    projectList,
			},
			{
				Name:      "create",
				Usage:     "create a project; you become its admin (global admins)",
				UsageText: "gpud project create [--json] NAME",
				Description: `NAME: 1-63 lowercase letters, digits, '-' or '_'.

Example:
   gpud project create research && gpud project member add research alice`,
				Flags:  serverFlags(jsonFlag()),
				Action: projectCreate,
			},
			{
				Name:      "delete",
				Usage:     "delete a project with its finished runs, members, queues, secrets and gateways (global admins)",
				UsageText: "gpud project delete NAME",
				Description: `The server refuses, naming each, while the project has runs that are not finished
(gpud stop RUN), fleets (gpud fleet delete), volumes (gpud volume delete) or backends
(gpud backend delete): each has its own delete that cleans up what it holds on hosts.

Example:
   gpud project delete research`,
				Flags:  serverFlags(),
				Action: projectDelete,
			},
			memberCommand(),
		},
	}
}

// memberCommand manages a project's members.
func memberCommand() *cli.Command {
	role := func(usage string) cli.Flag {
		return &cli.StringFlag{Name: "role", Aliases: []string{"r"}, Usage: usage}
	}
	return &cli.Command{
		Name:  "member",
		Usage: "list, add, change and remove a project's members (managers and admins of the project)",
		Description: `Roles: user, manager, admin. A member never grants a role above its own, and never
changes or removes a member whose role is above its own: the server refuses, and says so.

Examples:
   gpud project member list research
   gpud project member add research bob                   # as a user
   gpud project member add --role manager research alice
   gpud project member set-role --role user research alice
   gpud project member remove research bob`,
		Subcommands: []*cli.Command{
			{
				Name:      "list",
				Usage:     "list a project's members and their roles (any member)",
				UsageText: "gpud project member list [--json] PROJECT",
				Flags:     serverFlags(jsonFlag()),
				Action:    memberList,
			},
			{
				Name:      "add",
				Usage:     "add a user to a project with a role (default user)",
				UsageText: "gpud project member add [--role user|manager|admin] [--json] PROJECT USER",
				Flags:     serverFlags(role("user, manager or admin (default: user)"), jsonFlag()),
				Action:    memberAdd,
			},
			{
				Name:      "set-role",
				Usage:     "change a member's role",
				UsageText: "gpud project member set-role --role user|manager|admin [--json] PROJECT USER",
				Flags:     serverFlags(role("the new role: user, manager or admin (required)"), jsonFlag()),
				Action:    memberSetRole,
			},
			{
				Name:      "remove",
				Usage:     "remove a member from a project (their runs stay)",
				UsageText: "gpud project member remove PROJECT USER",
				Flags:     serverFlags(),
				Action:    memberRemove,
			},
		},
	}
}

// serverFlags is clientFlags without --project, for commands whose
// project is an argument or that are not about one project.
func serverFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "server", Usage: "the server entry of ~/.gpud/config.yml to use (default: the current one; $GPUD_SERVER overrides the file)"},
	}, extra...)
}

// posArgs returns exactly len(names) positional arguments, or a usage
// error that names them and, for a flag written after them (urfave/cli
// stops reading flags at the first argument), the line to write instead.
func posArgs(c *cli.Context, names ...string) ([]string, error) {
	args := c.Args().Slice()
	cmd := commandPath(c)
	name := strings.TrimPrefix(cmd, "gpud ")
	for i, a := range args {
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			fixed := append(slices.Clone(args[i:]), args[:i]...)
			return nil, usageError(fmt.Errorf("%s: flag %s after %s — put flags before the arguments, like %s %s",
				name, a, strings.Join(args[:i], " "), cmd, strings.Join(fixed, " ")))
		}
	}
	if len(args) != len(names) {
		if len(names) == 0 {
			return nil, usageError(fmt.Errorf("%s takes no arguments (%s --help)", name, cmd))
		}
		return nil, usageError(fmt.Errorf("%s: give %s, like %s %s (%s --help)", name,
			strings.Join(names, " and "), cmd, strings.Join(names, " "), cmd))
	}
	return args, nil
}

// commandPath is the command line's command, "gpud project member add"
// (Command.FullName names only the last word below the top level).
func commandPath(c *cli.Context) string {
	var names []string
	for _, x := range c.Lineage() {
		if x.Command != nil && x.Command.Name != "" {
			names = append([]string{x.Command.Name}, names...)
		}
	}
	if len(names) == 0 || names[0] != "gpud" {
		names = append([]string{"gpud"}, names...)
	}
	return strings.Join(names, " ")
}

// checkRole refuses a role the server does not know before asking it.
func checkRole(c *cli.Context, role string) error {
	switch role {
	case api.RoleUser, api.RoleManager, api.RoleAdmin:
		return nil
	}
	return usageError(fmt.Errorf("%s: --role %q: use user, manager or admin", strings.TrimPrefix(commandPath(c), "gpud "), role))
}

func projectList(c *cli.Context) error {
	if _, err := posArgs(c); err != nil {
		return err
	}
	cl, _, err := connect(c)
	if err != nil {
		return err
	}
	ps, err := cl.ListProjects(c.Context)
	if err != nil {
		return fmt.Errorf("project list: %w", err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, ps)
	}
	if len(ps) == 0 {
		fmt.Fprintln(c.App.Writer, "no projects (you are a member of none; a global admin adds you: gpud project member add PROJECT USER)")
		return nil
	}
	tb := newTable(c.App.Writer, "NAME", "YOUR ROLE", "OWNER", "CREATED")
	now := time.Now()
	for _, p := range ps {
		role := p.Role
		if role == "" {
			role = "- (global admin)"
		}
		tb.row(p.Name, role, orDash(p.Owner), ago(now, p.CreatedAt))
	}
	return tb.flush()
}

func projectCreate(c *cli.Context) error {
	args, err := posArgs(c, "NAME")
	if err != nil {
		return err
	}
	cl, _, err := connect(c)
	if err != nil {
		return err
	}
	p, err := cl.CreateProject(c.Context, args[0])
	if err != nil {
		return fmt.Errorf("project create %s: %w", args[0], err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, p)
	}
	fmt.Fprintf(c.App.Writer, "project %s created; you are its admin (add members: gpud project member add %s USER)\n", p.Name, p.Name)
	return nil
}

func projectDelete(c *cli.Context) error {
	args, err := posArgs(c, "NAME")
	if err != nil {
		return err
	}
	cl, _, err := connect(c)
	if err != nil {
		return err
	}
	if err := cl.DeleteProject(c.Context, args[0]); err != nil {
		return fmt.Errorf("project delete %s: %w", args[0], err)
	}
	fmt.Fprintf(c.App.Writer, "project %s deleted\n", args[0])
	return nil
}

func memberList(c *cli.Context) error {
	args, err := posArgs(c, "PROJECT")
	if err != nil {
		return err
	}
	cl, _, err := connect(c)
	if err != nil {
		return err
	}
	ms, err := cl.ListMembers(c.Context, args[0])
	if err != nil {
		return fmt.Errorf("project member list %s: %w", args[0], err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, ms)
	}
	tb := newTable(c.App.Writer, "USER", "ROLE")
	for _, m := range ms {
		tb.row(m.User, m.Role)
	}
	return tb.flush()
}

// findMember returns user's membership of project, and whether it exists.
func findMember(c *cli.Context, cl *api.Client, project, user string) (api.Member, bool, error) {
	ms, err := cl.ListMembers(c.Context, project)
	if err != nil {
		return api.Member{}, false, err
	}
	for _, m := range ms {
		if m.User == user {
			return m, true, nil
		}
	}
	return api.Member{}, false, nil
}

func memberAdd(c *cli.Context) error {
	args, err := posArgs(c, "PROJECT", "USER")
	if err != nil {
		return err
	}
	role := c.String("role")
	if role == "" {
		role = api.RoleUser
	}
	if err := checkRole(c, role); err != nil {
		return err
	}
	project, user := args[0], args[1]
	cl, _, err := connect(c)
	if err != nil {
		return err
	}
	m, ok, err := findMember(c, cl, project, user)
	if err != nil {
		return fmt.Errorf("project member add %s %s: %w", project, user, err)
	}
	if ok {
		return invalidInputf("project member add %s %s: %s is already a member of %s, as %s; to change the role: gpud project member set-role --role %s %s %s",
			project, user, user, project, m.Role, role, project, user)
	}
	return setMember(c, cl, "add", project, user, role)
}

func memberSetRole(c *cli.Context) error {
	args, err := posArgs(c, "PROJECT", "USER")
	if err != nil {
		return err
	}
	role := c.String("role")
	if role == "" {
		return usageError(fmt.Errorf("project member set-role: give the new role, like gpud project member set-role --role manager %s", strings.Join(args, " ")))
	}
	if err := checkRole(c, role); err != nil {
		return err
	}
	project, user := args[0], args[1]
	cl, _, err := connect(c)
	if err != nil {
		return err
	}
	if _, ok, err := findMember(c, cl, project, user); err != nil {
		return fmt.Errorf("project member set-role %s %s: %w", project, user, err)
	} else if !ok {
		return invalidInputf("project member set-role %s %s: %s is not a member of %s; to add them: gpud project member add --role %s %s %s",
			project, user, user, project, role, project, user)
	}
	return setMember(c, cl, "set-role", project, user, role)
}

func setMember(c *cli.Context, cl *api.Client, verb, project, user, role string) error {
	m, err := cl.SetMember(c.Context, project, user, role)
	if err != nil {
		return fmt.Errorf("project member %s %s %s: %w", verb, project, user, err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, m)
	}
	fmt.Fprintf(c.App.Writer, "%s is %s of project %s\n", m.User, article(m.Role), m.Project)
	return nil
}

func memberRemove(c *cli.Context) error {
	args, err := posArgs(c, "PROJECT", "USER")
	if err != nil {
		return err
	}
	cl, _, err := connect(c)
	if err != nil {
		return err
	}
	if err := cl.DeleteMember(c.Context, args[0], args[1]); err != nil {
		var se *api.ServerError
		if errors.As(err, &se) && se.Code == api.CodeNotFound {
			return fmt.Errorf("project member remove %s %s: %s is not a member of %s (gpud project member list %s)", args[0], args[1], args[1], args[0], args[0])
		}
		return fmt.Errorf("project member remove %s %s: %w", args[0], args[1], err)
	}
	fmt.Fprintf(c.App.Writer, "%s removed from project %s\n", args[1], args[0])
	return nil
}

// article is "a user", "a manager", "an admin".
func article(role string) string {
	if role == api.RoleAdmin {
		return "an " + role
	}
	return "a " + role
}
