package guestfmt

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/testenv"
)

// TestLayerImageReproducible makes the image of the same tree unpacked
// twice, in opposite orders and at different times (so with other change
// times and directory orders, as on two hosts): both images must be the
// same bytes, and fsck must find each clean.
func TestLayerImageReproducible(t *testing.T) {
	_, err := exec.LookPath("mkfs.ext4")
	testenv.Require(t, err == nil, "mkfs.ext4 not installed (e2fsprogs; scripts/install-microvm.sh)")
	names := []string{"zeta", "alpha", "dir/inner", "dir/b", "mid", "1", "2"}
	unpack := func(root string, order []string) {
		t.Helper()
		for _, n := range order {
			p := filepath.Join(root, n)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(n+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("zeta", filepath.Join(root, "link")); err != nil {
			t.Fatal(err)
		}
		// Times as a layer's tar gives them, symlinks' own included.
		stamp := []unix.Timespec{{Sec: 1_700_000_000}, {Sec: 1_700_000_000}}
		for _, p := range append(order, "link", "dir", ".") {
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(root, p), stamp, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				t.Fatal(err)
			}
		}
	}
	a, b := t.TempDir(), t.TempDir()
	unpack(a, names)
	// b is unpacked in the other order and over a second later: other
	// change times (mkfs.ext4 copies their seconds), as on another host.
	time.Sleep(1100 * time.Millisecond)
	rev := append([]string(nil), names...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	unpack(b, rev)
	var digests []string
	for _, src := range []string{a, b} {
		img, err := LayerImage(t.TempDir(), src)
		if err != nil {
			t.Fatalf("LayerImage(%s) = %v", src, err)
		}
		if out, err := exec.Command("e2fsck", "-fn", img).CombinedOutput(); err != nil {
			t.Errorf("e2fsck -fn %s: %v\n%s", img, err, out)
		}
		d, err := LayerDigest(img)
		if err != nil {
			t.Fatal(err)
		}
		if want, err := fileDigest(img); err != nil || d != want {
			t.Errorf("LayerDigest(%s) = %s, want the file's digest %s (%v)", img, d, want, err)
		}
		digests = append(digests, d)
	}
	if digests[0] != digests[1] {
		t.Errorf("the same tree unpacked twice made images %s and %s, want one", digests[0], digests[1])
	}
}
