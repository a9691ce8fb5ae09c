package httpapi

import (
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

// TestOpenAPIMatchesRoutes checks that proto/openapi.yaml documents exactly
// the routes the server serves, each with the access it requires
// (x-helmr-grant).
func TestOpenAPIMatchesRoutes(t *testing.T) {
	data, err := os.ReadFile("../../proto/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string `yaml:"openapi"`
		Paths   map[string]map[string]struct {
			Grant string `yaml:"x-helmr-grant"`
		} `yaml:"paths"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("parse openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version = %q, want 3.x", doc.OpenAPI)
	}
	var documented []string
	for p, ops := range doc.Paths {
		for m, op := range ops {
			switch m {
			case "get", "post", "put", "patch", "delete":
				documented = append(documented, strings.ToUpper(m)+" "+p+" "+op.Grant)
			}
		}
	}
	var served []string
	for _, r := range New(Config{}).Routes() {
		served = append(served, r.Method+" "+r.Path+" "+string(r.Access))
	}
	sort.Strings(documented)
	sort.Strings(served)
	if diff := cmp.Diff(served, documented); diff != "" {
		t.Errorf("routes served vs documented in proto/openapi.yaml (-served +documented):\n%s", diff)
	}
}
