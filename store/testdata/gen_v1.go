//go:build ignore

// gen_v1 writes testdata/state-v1.db, a state file in schema 1 (see
// store.SchemaVersion), for the migration test. Run from the repository
// root:
//
//	go run ./store/testdata/gen_v1.go
//
// The file is committed; regenerate it only if this program changes.
package main

import (
	"encoding/json"
	"log"
	"os"
	"time"

	"go.etcd.io/bbolt"
)

// v1 records: plain JSON, RFC 3339 times, secret material in "secret".
type v1 struct {
	ID        string          `json:"id"`
	Project   string          `json:"project,omitempty"`
	Name      string          `json:"name,omitempty"`
	Status    string          `json:"status,omitempty"`
	Queue     string          `json:"queue,omitempty"`
	Fleet     string          `json:"fleet,omitempty"`
	Instance  string          `json:"instance,omitempty"`
	Run       string          `json:"run,omitempty"`
	User      string          `json:"user,omitempty"`
	Role      string          `json:"role,omitempty"`
	TokenHash string          `json:"token_hash,omitempty"`
	Version   uint64          `json:"version"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	Spec      json.RawMessage `json:"spec,omitempty"`
	Secret    []byte          `json:"secret,omitempty"`
}

func main() {
	const path = "store/testdata/state-v1.db"
	os.Remove(path)
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	data := map[string][]v1{
		"projects": {{ID: "main", Name: "main", Version: 1}},
		"users":    {{ID: "alice", TokenHash: "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b", Version: 1}},
		"members":  {{ID: "main/alice", Project: "main", User: "alice", Role: "admin", Version: 1}},
		"queues":   {{ID: "research", Project: "main", Version: 3, Spec: json.RawMessage(`{"deserved":{"gpu":4}}`)}},
		"fleets":   {{ID: "gpu", Project: "main", Status: "active", Version: 1, Secret: []byte("-----BEGIN OPENSSH PRIVATE KEY-----v1-fixture")}},
		"hosts":    {{ID: "h1", Project: "main", Fleet: "gpu", Status: "busy", Version: 7}},
		"runs":     {{ID: "r1", Project: "main", Queue: "research", Status: "running", Version: 4}},
		"jobs":     {{ID: "r1-0", Project: "main", Run: "r1", Queue: "research", Instance: "h1", Status: "running", Version: 5}},
		"secrets":  {{ID: "main/hf", Project: "main", Name: "hf", Version: 2, Secret: []byte("hf_v1_fixture_token")}},
		"events":   {},
		"volumes":  {},
		"gateways": {},
		"replicas": {},
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		meta, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		if err := meta.Put([]byte("schema"), []byte("1")); err != nil {
			return err
		}
		for bucket, recs := range data {
			b, err := tx.CreateBucket([]byte(bucket))
			if err != nil {
				return err
			}
			for _, r := range recs {
				r.CreatedAt, r.UpdatedAt = at, at.Add(time.Hour)
				v, err := json.Marshal(r)
				if err != nil {
					return err
				}
				if err := b.Put([]byte(r.ID), v); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}
