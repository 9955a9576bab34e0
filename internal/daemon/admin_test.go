package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/testutil"
)

// TestListenAdminDirectory: the admin socket is refused in a directory
// someone else could write to (they could swap the socket for theirs), and
// accepted in a private one or a sticky one like /tmp.
func TestListenAdminDirectory(t *testing.T) {
	tests := []struct {
		name  string
		mode  os.FileMode
		owner int // -1: the test's own user
		want  string
	}{
		{"private", 0o700, -1, ""},
		{"readable by all", 0o755, -1, ""},
		{"world-writable", 0o777, -1, "has mode 0777"},
		{"group-writable, other group", 0o770, -1, "has mode 0770"},
		{"sticky like /tmp", 0o777 | os.ModeSticky, -1, ""},
		{"owned by another user", 0o700, 65534, "belongs to uid 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if tt.owner >= 0 || strings.Contains(tt.name, "other group") {
				testutil.RequireRoot(t, "chowns the socket directory")
				uid, gid := os.Geteuid(), 65534
				if tt.owner >= 0 {
					uid = tt.owner
				}
				if err := os.Chown(dir, uid, gid); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(dir, tt.mode); err != nil {
				t.Fatal(err)
			}
			ln, err := listenAdmin(filepath.Join(dir, "olcd.sock"))
			if ln != nil {
				ln.Close()
			}
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
