package daemon

import (
	"net/http"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// Secrets are records with ID "project/name"; the value lives in
// Record.Sealed, which the store encrypts at rest.

func secretID(project, name string) string { return project + "/" + name }

// secretValues returns the project's secrets by name, for interpolation.
func (s *accountsAPI) secretValues(project string) map[string]string {
	out := map[string]string{}
	for _, r := range s.store.Secrets().ByProject(project) {
		out[r.Name] = string(r.Sealed)
	}
	return out
}

func secretOut(r store.Record, withValue bool) api.Secret {
	out := api.Secret{Name: r.Name, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if withValue {
		v := string(r.Sealed)
		out.Value = &v
	}
	return out
}

func checkSecretName(name string) error {
	if name == "" || len(name) > 128 || strings.Trim(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != "" {
		return badField("name", "%q: use letters, digits and '_' (like HF_TOKEN)", name)
	}
	return nil
}

func (s *accountsAPI) handleListSecrets(w http.ResponseWriter, r *http.Request) error {
	project, _, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	out := []api.Secret{}
	for _, rec := range s.store.Secrets().ByProject(project) {
		out = append(out, secretOut(rec, false))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *accountsAPI) handleGetSecret(w http.ResponseWriter, r *http.Request) error {
	project, _, err := s.authorize(r, api.RoleManager)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	rec, err := s.store.Secrets().Get(secretID(project, name))
	if err != nil {
		return notFound("secret", name)
	}
	writeJSON(w, http.StatusOK, secretOut(rec, true))
	return nil
}

func (s *accountsAPI) handleSetSecret(w http.ResponseWriter, r *http.Request) error {
	project, c, err := s.authorize(r, api.RoleManager)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := checkSecretName(name); err != nil {
		return err
	}
	var req api.SetSecretRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if req.Value == "" {
		// {}, {"value": null} and {"value": ""} all decode to "": none of
		// them may blank a stored secret.
		return badField("value", "a secret needs a non-empty value; to remove %s use DELETE (gpud secret delete %s)", name, name)
	}
	rec := store.Record{Kind: store.KindSecret, ID: secretID(project, name), Project: project, Name: name, User: c.name, Sealed: []byte(req.Value)}
	if _, err := s.store.Apply(r.Context(), store.Put(rec), s.event(project, store.KindSecret, rec.ID, "set", "set by "+c.name)); err != nil {
		return err
	}
	stored, err := s.store.Secrets().Get(rec.ID)
	if err != nil {
		return err // deleted between the write and this read
	}
	writeJSON(w, http.StatusOK, secretOut(stored, false))
	return nil
}

func (s *accountsAPI) handleDeleteSecret(w http.ResponseWriter, r *http.Request) error {
	project, c, err := s.authorize(r, api.RoleManager)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if _, err := s.store.Secrets().Get(secretID(project, name)); err != nil {
		return notFound("secret", name)
	}
	if _, err := s.store.Apply(r.Context(), store.Delete(store.KindSecret, secretID(project, name)),
		s.event(project, store.KindSecret, secretID(project, name), "deleted", "deleted by "+c.name)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
