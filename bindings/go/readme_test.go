package polylb_test

import (
	"testing"

	"github.com/polylb/polylb/bindings/go/internal/readmecheck"
)

// README.md's usage section must be the body of Example and its output block
// that Example's expected output.
func TestReadmeShowsTheExample(t *testing.T) {
	readmecheck.ShowsExample(t, "example_test.go", "README.md")
}

// Its Call section shows ExampleBalancer_Call the same way.
func TestReadmeShowsTheCallExample(t *testing.T) {
	readmecheck.ShowsExampleFunc(t, "example_test.go", "README.md", "ExampleBalancer_Call")
}

// Its subsetting paragraph shows Example_subsetting the same way.
func TestReadmeShowsTheSubsettingExample(t *testing.T) {
	readmecheck.ShowsExampleFunc(t, "example_test.go", "README.md", "Example_subsetting")
}
