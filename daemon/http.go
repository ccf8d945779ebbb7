package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"gpud.dev/gpud/api"
)

// apiErr builds the error a handler returns; writeError sends it.
func apiErr(status int, code, field, format string, args ...any) *api.ServerError {
	return &api.ServerError{Status: status, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

func notFound(what, name string) *api.ServerError {
	return apiErr(http.StatusNotFound, api.CodeNotFound, "", "%s %q not found", what, name)
}

func forbidden(format string, args ...any) *api.ServerError {
	return apiErr(http.StatusForbidden, api.CodeForbidden, "", format, args...)
}

func conflict(format string, args ...any) *api.ServerError {
	return apiErr(http.StatusConflict, api.CodeConflict, "", format, args...)
}

func badField(field, format string, args ...any) *api.ServerError {
	return apiErr(http.StatusBadRequest, api.CodeInvalidField, field, format, args...)
}

// writeJSON sends v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// An encoding error here is the client gone mid-response (our values
	// always marshal): nothing is left to tell it.
	_ = json.NewEncoder(w).Encode(v)
}

// writeError sends err as an api.ServerError; anything else is a 500 whose
// detail stays in the log.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var se *api.ServerError
	var cre *corruptRecordError
	switch {
	case errors.As(err, &se):
	case errors.As(err, &cre):
		// A record the server cannot read: the request cannot go on, and
		// the caller learns which record (its id, never its contents).
		s.log.Error().Err(err).Str("method", r.Method).Str("path", r.URL.Path).Str("kind", string(cre.Kind)).Str("id", cre.ID).Msg("request failed on a corrupt record")
		se = apiErr(http.StatusInternalServerError, api.CodeInternal, "", "%s %s: its stored %s does not decode; the server log has the details", cre.record(), cre.ID, cre.Part)
	default:
		s.log.Error().Err(err).Str("method", r.Method).Str("path", r.URL.Path).Msg("request failed")
		se = apiErr(http.StatusInternalServerError, api.CodeInternal, "", "internal error; the server log has the details")
	}
	writeJSON(w, se.Status, se)
}

// decodeJSON reads the request body into v strictly: at most
// api.MaxRequestBody bytes, no unknown fields, no wrong types, nothing
// after the value. Its errors name the field at fault.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return apiErr(http.StatusUnsupportedMediaType, api.CodeUnsupportedMedia, "", "send the body as application/json, not %s", ct)
	}
	body := http.MaxBytesReader(w, r.Body, api.MaxRequestBody)
	return decodeStrict(body, v)
}

// decodeStrict is decodeJSON without the HTTP parts; the fuzz target runs it.
func decodeStrict(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return apiErr(http.StatusBadRequest, api.CodeInvalidJSON, "", "the body holds more than one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return decodeError(err)
		}
		return apiErr(http.StatusBadRequest, api.CodeInvalidJSON, "", "unexpected data after the JSON value")
	}
	return nil
}

// decodeError turns encoding/json's errors into API errors with fields.
func decodeError(err error) error {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		ute *json.UnmarshalTypeError
		ae  *api.ServerError
		el  api.ErrorList
	)
	switch {
	case errors.As(err, &mbe):
		return apiErr(http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge, "", "the body is over %d bytes", mbe.Limit)
	case errors.Is(err, io.EOF):
		return apiErr(http.StatusBadRequest, api.CodeInvalidJSON, "", "the body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return apiErr(http.StatusBadRequest, api.CodeInvalidJSON, "", "the JSON body ends early")
	case errors.As(err, &se):
		return apiErr(http.StatusBadRequest, api.CodeInvalidJSON, "", "malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &ute):
		field := jsonField(ute.Field)
		return apiErr(http.StatusBadRequest, api.CodeInvalidField, field, "%s: want %s, got JSON %s", fieldName(field), ute.Type, ute.Value)
	case errors.As(err, &el):
		return configErrors(el)
	case errors.As(err, &ae):
		return ae
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return apiErr(http.StatusBadRequest, api.CodeUnknownField, field, "unknown field %q; check the spelling against the API reference (docs/server.md)", field)
	}
	return apiErr(http.StatusBadRequest, api.CodeInvalidJSON, "", "bad JSON body: %v", err)
}

// jsonField drops embedded Go struct names from encoding/json's field path
// ("ApplyRequest.configuration_yaml" -> "configuration_yaml").
func jsonField(path string) string {
	parts := strings.Split(path, ".")
	out := parts[:0]
	for _, p := range parts {
		if p != "" && p[0] >= 'A' && p[0] <= 'Z' {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ".")
}

func fieldName(f string) string {
	if f == "" {
		return "the body"
	}
	return f
}

// configErrors reports every configuration error at once.
func configErrors(el api.ErrorList) *api.ServerError {
	se := apiErr(http.StatusBadRequest, api.CodeInvalidConfiguration, "configuration", "the configuration is invalid")
	for _, e := range el {
		se.Errors = append(se.Errors, e.Error())
	}
	if len(el) > 0 {
		se.Message = el[0].Error()
		if el[0].Path != "" {
			se.Field = "configuration." + el[0].Path
		}
	}
	return se
}

// notHonoured is the answer to a configuration whose fields gpud cannot
// honour where the run may go: one error per field, each naming it, the
// target and what to do instead.
func notHonoured(el api.ErrorList) *api.ServerError {
	se := configErrors(el)
	se.Status, se.Code = http.StatusUnprocessableEntity, api.CodeNotHonoured
	return se
}

// handlerFunc is an API handler that returns its error instead of writing it.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// route wraps h: errors become JSON error responses.
func (s *Server) route(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// readApplyConfig is the preamble of the apply handlers of the
// configuration kinds that are stored as they are (fleet, queue): it checks
// that the caller holds at least role in the path's project, decodes the
// ApplyRequest body and parses its configuration, and returns the project,
// the caller and the parsed configuration, or the error to send back. The
// caller still checks that the configuration is of the kind it applies.
func (s *Server) readApplyConfig(w http.ResponseWriter, r *http.Request, role string) (string, caller, *api.Config, error) {
	project, c, err := s.authorize(r, role)
	if err != nil {
		return "", caller{}, nil, err
	}
	var req api.ApplyRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return "", caller{}, nil, err
	}
	cfg, err := parseConfig(req)
	if err != nil {
		return "", caller{}, nil, err
	}
	if el := checkKindFields(cfg, fieldCheck{srv: s, project: project}); len(el) > 0 {
		return "", caller{}, nil, notHonoured(el)
	}
	return project, c, cfg, nil
}
