package polylb

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// Without cgo the package does not build, and its one error says what to set.
func TestWithoutCgoTheBuildSaysWhatToSet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	cmd := exec.Command(runtime.GOROOT()+"/bin/go", "build", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("the package built without cgo")
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "polylb_needs_cgo__set_CGO_ENABLED_1_and_install_a_C_compiler") {
		t.Fatalf("want the package line and one error naming CGO_ENABLED, got:\n%s", out)
	}
}
