package polylbdubbo_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/polylb/polylb/bindings/go/internal/readmecheck"
)

// README.md's usage section must be the body of Example and its output block
// that Example's expected output.
func TestReadmeShowsTheExample(t *testing.T) {
	readmecheck.ShowsExample(t, "example_test.go", "README.md")
}

// README.md tells a reader copying Example into a program that it also needs
// what example_helpers_test.go holds: so example_test.go declares Example
// alone, and every other name Example uses is in the helpers file.
func TestExampleNeedsOnlyTheHelpersFile(t *testing.T) {
	file, err := parser.ParseFile(token.NewFileSet(), "example_test.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, decl := range file.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Name.Name != "Example" || d.Recv != nil {
				t.Errorf("example_test.go declares func %s: move it to example_helpers_test.go, which README.md points to", d.Name.Name)
			}
		case *ast.GenDecl:
			if d.Tok != token.IMPORT {
				for _, spec := range d.Specs {
					if s, ok := spec.(*ast.TypeSpec); ok {
						t.Errorf("example_test.go declares type %s: move it to example_helpers_test.go, which README.md points to", s.Name.Name)
					} else {
						t.Errorf("example_test.go declares a %s: move it to example_helpers_test.go, which README.md points to", d.Tok)
					}
				}
			}
		}
	}
}
