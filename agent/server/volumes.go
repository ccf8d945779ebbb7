package server

import (
	"errors"
	"net/http"

	"gpud.dev/gpud/agent"
	"gpud.dev/gpud/api"
)

// The managed-volume routes take the volume's project and id, never a
// path: the agent derives the directory from them after checking them
// (agent.RemoveManagedVolume). Only the agent's token holder, the server,
// reaches them.

func volumeRef(r *http.Request) api.ManagedVolumeRef {
	return api.ManagedVolumeRef{Project: r.PathValue("project"), ID: r.PathValue("id"), Name: r.URL.Query().Get("name")}
}

func (s *server) volumeUsage(w http.ResponseWriter, r *http.Request) {
	u, err := s.a.ManagedVolumeUsage(volumeRef(r))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, u)
}

func (s *server) removeVolume(w http.ResponseWriter, r *http.Request) {
	err := s.a.RemoveManagedVolume(volumeRef(r))
	switch {
	case errors.Is(err, agent.ErrVolumeInUse):
		writeError(w, http.StatusConflict, err)
	case err != nil:
		fail(w, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
