package httpfast

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The OpenAPI document names the project's license, and the repository
// carries its text.
func TestOpenAPILicense(t *testing.T) {
	var doc struct {
		Info struct {
			License struct{ Name, URL string } `json:"license"`
		} `json:"info"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	if l := doc.Info.License; l.Name != "Apache-2.0" || l.URL != "https://www.apache.org/licenses/LICENSE-2.0" {
		t.Fatalf("info.license = %+v, want Apache-2.0", l)
	}
	text, err := os.ReadFile("../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if s := string(text); !strings.Contains(s, "Apache License") || !strings.Contains(s, "Version 2.0, January 2004") ||
		!strings.Contains(s, "END OF TERMS AND CONDITIONS") {
		t.Fatal("LICENSE is not the full Apache-2.0 text")
	}
}
