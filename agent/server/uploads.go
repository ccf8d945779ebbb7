package server

import (
	"errors"
	"net/http"

	"gpud.dev/gpud/agent"
)

// hasUpload answers 200 when the upload archive is on this host, 404 when not.
func (s *server) hasUpload(w http.ResponseWriter, r *http.Request) {
	if !s.a.HasUpload(r.PathValue("sha256")) {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// putUpload keeps an upload archive the server pushes before a job that
// unpacks it starts (the body is bounded by agent.MaxUploadBytes).
func (s *server) putUpload(w http.ResponseWriter, r *http.Request) {
	sum := r.PathValue("sha256")
	if s.a.HasUpload(sum) {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	err := s.a.StoreUpload(sum, http.MaxBytesReader(w, r.Body, agent.MaxUploadBytes))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, err)
	case err != nil:
		fail(w, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
