package polylb_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// README.md's usage section must be the body of Example (which `go test`
// runs and checks against its // Output: comment), and its output block must
// be that expected output. So the README shows code that is known to work.
func TestReadmeShowsTheExample(t *testing.T) {
	source, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "example_test.go", source, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var body string
	for _, decl := range file.Decls {
		if fn, ok := decl.(*ast.FuncDecl); ok && fn.Name.Name == "Example" {
			body = string(source[fset.Position(fn.Body.Lbrace).Offset+2 : fset.Position(fn.Body.Rbrace).Offset])
		}
	}
	if body == "" {
		t.Fatal("no func Example in example_test.go")
	}
	code, output, found := strings.Cut(body, "\t// Output:\n")
	if !found {
		t.Fatal("Example has no // Output: comment")
	}
	code = dedent(code, "\t")
	output = dedent(output, "\t// ")

	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+code+"```\n") {
		t.Errorf("README.md does not show Example's body verbatim in a ```go block; expected:\n%s", code)
	}
	if !strings.Contains(string(readme), "```text\n"+output+"```\n") {
		t.Errorf("README.md does not show Example's output in a ```text block; expected:\n%s", output)
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
