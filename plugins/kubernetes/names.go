package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// dnsLabel turns an id into a DNS-1123 label of at most max characters
// with prefix: lower case, other characters as '-', and a hash of the id
// appended whenever that changed or shortened it, so two ids never share
// a name.
func dnsLabel(prefix, id string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(id) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	name := prefix + s
	if s == id && len(name) <= max {
		return name
	}
	sum := sha256.Sum256([]byte(id))
	h := hex.EncodeToString(sum[:4])
	if keep := max - len(prefix) - len(h) - 1; len(s) > keep {
		s = strings.TrimRight(s[:keep], "-")
	}
	if s == "" {
		return prefix + h
	}
	return prefix + s + "-" + h
}

// labelValue is id when it is a valid label value, else a sanitized
// form with a hash (the full id is kept in an annotation).
func labelValue(id string) string {
	if len(validation.IsValidLabelValue(id)) == 0 {
		return id
	}
	return dnsLabel("", id, 63)
}

// gangBase names a gang's objects: its ConfigMap and headless Service,
// and, with "-<rank>", its pods (the pods' hostnames under the Service).
func gangBase(gang string) string { return dnsLabel("gpud-", gang, 52) }

// gpuModel reduces GPU feature discovery's product label
// (NVIDIA-H100-80GB-HBM3) to the model offers name, as the server names
// its hosts' devices (H100): the first word that is not a vendor's.
func gpuModel(product string) string {
	for _, w := range strings.FieldsFunc(strings.ToUpper(product), func(r rune) bool { return r == '-' || r == ' ' || r == '_' }) {
		switch w {
		case "NVIDIA", "TESLA", "GEFORCE", "AMD", "INSTINCT":
			continue
		}
		return w
	}
	return ""
}
