package telemetry

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"gocl/runtime/bootstrap"
	"gocl/runtime/config/configtest"
)

// The status directory is opened without following a symlink and refused
// unless it is this user's alone: another user who plants a symlink (or a
// directory of their own) at /tmp/gocl-UID does not get the keys.
func TestStatusDirRefusesWhatIsNotOurs(t *testing.T) {
	base := t.TempDir()
	theirs := filepath.Join(base, "theirs") // where a planted symlink would send the keys
	if err := os.Mkdir(theirs, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(theirs, link); err != nil {
		t.Fatal(err)
	}
	wide := filepath.Join(base, "wide")
	if err := os.Mkdir(wide, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(wide, 0o755) // not through Mkdir: the umask would narrow it
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	cases := []struct {
		dir  string
		want []string
	}{
		{link, []string{"symlink"}},
		{wide, []string{"mode 0755", "chmod 700 " + wide}},
		{file, []string{"not a directory"}},
	}
	if os.Getuid() == 0 { // another owner: root can make one
		other := filepath.Join(base, "other")
		os.Mkdir(other, 0o700)
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			dir  string
			want []string
		}{other, []string{"owned by uid 65534, not by you (uid 0)"}})
	} else {
		t.Log("not root: the other-owner case is not tried")
	}
	for _, tc := range cases {
		configtest.Setenv(t, "GOCL_STATUS_DIR", tc.dir)
		err := ListenStatus("1", func(bootstrap.Request) any { return nil })
		if err == nil {
			t.Errorf("%s: accepted", tc.dir)
			continue
		}
		for _, w := range append(tc.want, tc.dir, "refused", "remove it, or set GOCL_STATUS_DIR to a directory only you can read") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.dir, err, w)
			}
		}
	}
	if names, _ := os.ReadDir(theirs); len(names) != 0 {
		t.Errorf("the symlink's target got %v", names)
	}

	// A fresh directory is made 0700 and gets this process's key (0600) and socket.
	mine := filepath.Join(base, "new", "st")
	configtest.Setenv(t, "GOCL_STATUS_DIR", mine)
	if err := ListenStatus("1", func(bootstrap.Request) any { return nil }); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(mine, &st); err != nil || st.Mode&0o777 != 0o700 || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		t.Errorf("%s: mode %o, %v", mine, st.Mode, err)
	}
	pid := filepath.Join(mine, strconv.Itoa(os.Getpid()))
	if fi, err := os.Lstat(pid + ".key"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key: %v %v", fi, err)
	}
	if fi, err := os.Lstat(pid + ".sock"); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket: %v %v", fi, err)
	}
}

// A TCP status endpoint needs a token of at least 128 bits' spelling; the
// error names the variable and the command that makes a good one.
func TestStatusTokenStrength(t *testing.T) {
	configtest.Setenv(t, "GOCL_STATUS_DIR", t.TempDir())
	for _, weak := range []string{"", "s3cret", "0123456789abcdef0123456789abcde", strings.Repeat("ab", 20)} {
		configtest.Setenv(t, "GOCL_STATUS_TOKEN", weak)
		err := ListenStatus("tcp:127.0.0.1:0", func(bootstrap.Request) any { return nil })
		if err == nil {
			t.Errorf("token %q accepted", weak)
			continue
		}
		for _, w := range []string{"GOCL_STATUS_TOKEN", "secrets.token_urlsafe(32)"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("token %q: error %q does not say %q", weak, err, w)
			}
		}
	}
	for _, good := range []string{"0123456789abcdef0123456789abcdef", "Yq3u0t1Wd5_bXrQnZkLh2PpA8sVv-EoJcGmT4iRyF7w"} {
		if err := checkStatusToken(good, "tcp:x:1"); err != nil {
			t.Errorf("token %q refused: %v", good, err)
		}
	}
}
