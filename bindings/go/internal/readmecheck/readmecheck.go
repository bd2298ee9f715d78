// Package readmecheck checks that a README shows a package's Example (or
// another example function): its body verbatim in a ```go block and its
// expected output in a ```text block.
// `go test` runs the Example and checks that output, so the README shows code
// known to work.
package readmecheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// ShowsExample fails t unless readmePath shows the body and the output of
// func Example in exampleFile.
func ShowsExample(t *testing.T, exampleFile, readmePath string) {
	t.Helper()
	ShowsExampleFunc(t, exampleFile, readmePath, "Example")
}

// ShowsExampleFunc is ShowsExample for the example function called name,
// e.g. "ExampleBalancer_Call".
func ShowsExampleFunc(t *testing.T, exampleFile, readmePath, name string) {
	t.Helper()
	source, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, exampleFile, source, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var body string
	for _, decl := range file.Decls {
		if fn, ok := decl.(*ast.FuncDecl); ok && fn.Name.Name == name {
			body = string(source[fset.Position(fn.Body.Lbrace).Offset+2 : fset.Position(fn.Body.Rbrace).Offset])
		}
	}
	if body == "" {
		t.Fatalf("no func %s in %s", name, exampleFile)
	}
	code, output, found := strings.Cut(body, "\t// Output:\n")
	if !found {
		t.Fatalf("%s has no // Output: comment", name)
	}
	code = dedent(code, "\t")
	output = dedent(output, "\t// ")

	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+code+"```\n") {
		t.Errorf("%s does not show %s's body verbatim in a ```go block; expected:\n%s", readmePath, name, code)
	}
	if !strings.Contains(string(readme), "```text\n"+output+"```\n") {
		t.Errorf("%s does not show %s's output in a ```text block; expected:\n%s", readmePath, name, output)
	}
}

// dedent removes prefix from every line that has it (blank lines stay blank).
func dedent(text, prefix string) string {
	lines := strings.SplitAfter(text, "\n")
	for i, line := range lines {
		lines[i] = strings.TrimPrefix(line, prefix)
	}
	return strings.Join(lines, "")
}
