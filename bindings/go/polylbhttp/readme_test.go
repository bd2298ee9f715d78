package polylbhttp_test

import (
	"testing"

	"github.com/polylb/polylb/bindings/go/internal/readmecheck"
)

// README.md's usage section must be the body of Example and its output.
func TestReadmeShowsTheExample(t *testing.T) {
	readmecheck.ShowsExample(t, "example_test.go", "README.md")
}
