package daemon

import (
	"context"
	"fmt"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

const (
	adminUser    = "admin"
	defaultQueue = "default"
	localFleet   = "local"
)

// bootstrap creates what a first start needs: the admin user (whose token
// it returns, once), the default project with its default queue, and the
// shared local fleet. Later starts change nothing unless rotate is set.
func (s *Server) bootstrap(ctx context.Context, rotate bool) (string, error) {
	var muts []store.Mutation
	token := ""
	admin, err := s.store.Users().Get(adminUser)
	if err != nil || rotate {
		if token, err = store.NewToken(); err != nil {
			return "", err
		}
		admin.Kind, admin.ID, admin.Name, admin.Role = store.KindUser, adminUser, adminUser, api.RoleAdmin
		admin.TokenHash = store.HashToken(token)
		muts = append(muts, store.Put(admin))
	}
	muts = append(muts, s.projectMutations(DefaultProject, adminUser)...)
	if !s.opts.NoLocalAgent {
		if _, err := s.store.Fleets().Get(localFleet); err != nil {
			muts = append(muts, store.Put(store.Record{Kind: store.KindFleet, ID: localFleet, Name: localFleet, Status: "active"}))
		}
	}
	if _, err := s.store.Apply(ctx, muts...); err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	return token, nil
}

// projectMutations creates project with owner as its admin member and its
// default queue, leaving whatever already exists alone.
func (s *Server) projectMutations(project, owner string) []store.Mutation {
	var muts []store.Mutation
	if _, err := s.store.Projects().Get(project); err != nil {
		muts = append(muts, store.Put(store.Record{Kind: store.KindProject, ID: project, Name: project, User: owner}))
	}
	if _, err := s.store.Members().Get(store.MemberID(project, owner)); err != nil {
		muts = append(muts, store.Put(store.Record{Kind: store.KindMember, ID: store.MemberID(project, owner), Project: project, User: owner, Role: api.RoleAdmin}))
	}
	if _, err := s.store.Queues().Get(queueID(project, defaultQueue)); err != nil {
		muts = append(muts, store.Put(store.Record{Kind: store.KindQueue, ID: queueID(project, defaultQueue), Project: project, Name: defaultQueue}))
	}
	return muts
}
