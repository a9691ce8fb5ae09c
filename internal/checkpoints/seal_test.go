package checkpoints

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"testing"
)

func testKey(t *testing.T) Key {
	t.Helper()
	var k Key
	if _, err := rand.Read(k[:]); err != nil {
		t.Fatal(err)
	}
	return k
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func seal(t *testing.T, plain []byte, k Key, id string) []byte {
	t.Helper()
	var out bytes.Buffer
	n, err := Seal(&out, bytes.NewReader(plain), k, id)
	if err != nil {
		t.Fatalf("Seal() = %v", err)
	}
	if n != int64(out.Len()) {
		t.Errorf("Seal() = %d bytes, wrote %d", n, out.Len())
	}
	return out.Bytes()
}

// chunks splits a sealed stream into its header and chunks.
func chunks(t *testing.T, sealed []byte) (hdr []byte, cs [][]byte) {
	t.Helper()
	hdr, rest := sealed[:headerLen], sealed[headerLen:]
	for len(rest) > 0 {
		n := int(binary.BigEndian.Uint32(rest[1:chunkHdrLen]))
		cs = append(cs, rest[:chunkHdrLen+n])
		rest = rest[chunkHdrLen+n:]
	}
	return hdr, cs
}

func TestSealRoundTrip(t *testing.T) {
	k := testKey(t)
	for _, n := range []int{0, 1, ChunkSize - 1, ChunkSize, ChunkSize + 1, 3*ChunkSize + 5} {
		plain := randomBytes(t, n)
		sealed := seal(t, plain, k, "ck_1")
		if _, cs := chunks(t, sealed); len(cs) != max(1, (n+ChunkSize-1)/ChunkSize) {
			t.Errorf("Seal(%d bytes) made %d chunks", n, len(cs))
		}
		if n > 64 && bytes.Contains(sealed, plain[:64]) {
			t.Errorf("Seal(%d bytes) output contains the plaintext", n)
		}
		var got bytes.Buffer
		if err := Open(&got, bytes.NewReader(sealed), k, "ck_1"); err != nil {
			t.Fatalf("Open(Seal(%d bytes)) = %v", n, err)
		}
		if !bytes.Equal(got.Bytes(), plain) {
			t.Errorf("Open(Seal(%d bytes)) = %d bytes, not the plaintext", n, got.Len())
		}
	}
}

func TestOpenFailures(t *testing.T) {
	k := testKey(t)
	plain := randomBytes(t, 2*ChunkSize+100)
	sealed := seal(t, plain, k, "ck_1")
	hdr, cs := chunks(t, sealed)
	if len(cs) != 3 {
		t.Fatalf("%d chunks, want 3", len(cs))
	}
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	flip := func(b []byte, i int) []byte {
		c := bytes.Clone(b)
		c[i] ^= 0x01
		return c
	}
	lastUnmarked := bytes.Clone(cs[2])
	lastUnmarked[0] = 0
	middleMarked := bytes.Clone(cs[1])
	middleMarked[0] = 1
	tests := []struct {
		name   string
		stream []byte
		key    Key
		id     string
		want   error
	}{
		{"tampered byte in a chunk", flip(sealed, headerLen+chunkHdrLen+ChunkSize/2), k, "ck_1", ErrTampered},
		{"tampered tag of the last chunk", flip(sealed, len(sealed)-1), k, "ck_1", ErrTampered},
		{"tampered nonce prefix", flip(sealed, len(magic)+saltLen), k, "ck_1", ErrTampered},
		{"tampered salt", flip(sealed, len(magic)), k, "ck_1", ErrWrongKey},
		{"truncated: last chunk dropped", join(hdr, cs[0], cs[1]), k, "ck_1", ErrTruncated},
		{"truncated: cut inside a chunk", sealed[:len(sealed)-10], k, "ck_1", ErrTruncated},
		{"truncated: header only", hdr, k, "ck_1", ErrTruncated},
		{"truncated: final mark moved to a middle chunk", join(hdr, cs[0], middleMarked), k, "ck_1", ErrTampered},
		{"final chunk unmarked", join(hdr, cs[0], cs[1], lastUnmarked), k, "ck_1", ErrTampered},
		{"reordered chunks", join(hdr, cs[1], cs[0], cs[2]), k, "ck_1", ErrTampered},
		{"chunk repeated", join(hdr, cs[0], cs[0], cs[1], cs[2]), k, "ck_1", ErrTampered},
		{"data after the final chunk", join(sealed, []byte{0}), k, "ck_1", ErrTampered},
		{"wrong key", sealed, testKey(t), "ck_1", ErrWrongKey},
		{"another checkpoint's blob", sealed, k, "ck_2", ErrTampered},
		{"plain bytes", plain, k, "ck_1", ErrNotSealed},
		{"empty", nil, k, "ck_1", ErrNotSealed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Open(&bytes.Buffer{}, bytes.NewReader(tt.stream), tt.key, tt.id)
			if !errors.Is(err, tt.want) {
				t.Errorf("Open() = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestParseKey(t *testing.T) {
	good := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	if k, err := ParseKey(good); err != nil || k[0] != 7 {
		t.Errorf("ParseKey(32 bytes) = %v, %v", k[0], err)
	}
	for _, bad := range []string{"", "not base64!", base64.StdEncoding.EncodeToString(make([]byte, 16)), base64.StdEncoding.EncodeToString(make([]byte, 33))} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) = nil error", bad)
		}
	}
}
