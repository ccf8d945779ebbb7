package api

import (
	"errors"
	"strings"

	"github.com/goccy/go-yaml"
)

// DecodeYAML is gpud's one set-up for decoding a YAML file into a Go
// value (scenarios, the client config): strict — an unknown field or a
// wrong type is an error, never ignored — and its error is an ErrorList
// whose Error names file:line:col, says what is wrong and shows the source
// line, like every other configuration error. Configurations (runs,
// fleets, queues, profiles) use the AST decoder of Parse, which reports
// every problem at once and resolves dstack's shorthand forms.
func DecodeYAML(file string, data []byte, v any) error {
	err := yaml.UnmarshalWithOptions(data, v, yaml.Strict())
	if err == nil {
		return nil
	}
	e := &Error{File: file, Message: err.Error()}
	var ye yaml.Error
	if errors.As(err, &ye) {
		e.Message = ye.GetMessage()
		if tk := ye.GetToken(); tk != nil && tk.Position != nil {
			e.Line, e.Column = tk.Position.Line, tk.Position.Column
			if lines := strings.Split(string(data), "\n"); e.Line >= 1 && e.Line <= len(lines) {
				e.Source = strings.TrimRight(lines[e.Line-1], "\r")
			}
		}
	}
	return ErrorList{e}
}
