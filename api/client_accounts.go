package api

import (
	"context"
	"net/url"
)

// The client calls of users, projects and members that client_calls.go
// lacks (the CLI's gpud user and gpud project commands).

// GetUser returns one user: the caller itself, or anyone for an admin.
func (c *Client) GetUser(ctx context.Context, name string) (User, error) {
	var u User
	return u, c.get(ctx, "/api/v1/users/"+url.PathEscape(name), &u)
}

// GetProject returns one project with the caller's role in it.
func (c *Client) GetProject(ctx context.Context, project string) (Project, error) {
	var p Project
	return p, c.get(ctx, projectPath(project, ""), &p)
}

// DeleteProject removes a project (global admins; refused while it has
// unfinished runs, fleets, volumes or backends).
func (c *Client) DeleteProject(ctx context.Context, project string) error {
	return c.del(ctx, projectPath(project, ""), nil)
}

// ListMembers returns a project's members and their roles.
func (c *Client) ListMembers(ctx context.Context, project string) ([]Member, error) {
	var ms []Member
	return ms, c.get(ctx, projectPath(project, "/members"), &ms)
}

// DeleteMember removes user from project.
func (c *Client) DeleteMember(ctx context.Context, project, user string) error {
	return c.del(ctx, projectPath(project, "/members/"+url.PathEscape(user)), nil)
}
