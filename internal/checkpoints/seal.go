package checkpoints

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Errors that a sealed checkpoint's Open returns; callers branch on them to
// tell an operator why a parked run cannot resume.
var (
	// ErrWrongKey: the checkpoint was sealed under another key.
	ErrWrongKey = errors.New("checkpoint sealed under another encryption key")
	// ErrTampered: a chunk fails authentication (changed, reordered or
	// from another checkpoint).
	ErrTampered = errors.New("checkpoint fails authentication (tampered or damaged)")
	// ErrTruncated: the sealed stream ends before its final chunk.
	ErrTruncated = errors.New("checkpoint truncated")
	// ErrNotSealed: the bytes are not a sealed checkpoint at all.
	ErrNotSealed = errors.New("not a sealed checkpoint")
)

// KeySize is the length of a checkpoint encryption key (AES-256).
const KeySize = 32

// ChunkSize is the most plaintext one sealed chunk holds.
const ChunkSize = 1 << 20

// Sealed stream layout (all integers big-endian):
//
//	magic "HELMRCK1" | salt [16] | nonce prefix [4] | key check [16]
//	then chunks: flag [1] (1 on the final chunk) | length [4] | AES-256-GCM ciphertext
//
// The chunk key is HKDF-SHA256 of the key with the salt; the key check is an HMAC under it, so a wrong key is told apart from
// damage. Chunk i's nonce is the nonce prefix and i; its additional data is
// the magic, checkpoint id, nonce prefix, i and the final flag, so a chunk
// moved, dropped, taken from another checkpoint or unmarked as final fails.
const (
	magic       = "HELMRCK1"
	saltLen     = 16
	prefixLen   = 4
	checkLen    = 16
	headerLen   = len(magic) + saltLen + prefixLen + checkLen
	chunkHdrLen = 5
	maxSealed   = ChunkSize + 16
)

// Key is a checkpoint encryption key.
type Key [KeySize]byte

// ParseKey decodes HELMR_CHECKPOINT_ENCRYPTION_KEY: base64 of 32 bytes.
func ParseKey(b64 string) (Key, error) {
	var k Key
	if b64 == "" {
		return k, errors.New("checkpoint encryption key is empty")
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return k, fmt.Errorf("checkpoint encryption key is not base64: %w", err)
	}
	if len(raw) != KeySize {
		return k, fmt.Errorf("checkpoint encryption key is %d bytes, want %d", len(raw), KeySize)
	}
	copy(k[:], raw)
	return k, nil
}

type streamKeys struct {
	aead  cipher.AEAD
	check [checkLen]byte
}

func deriveKeys(key Key, salt []byte) (*streamKeys, error) {
	sub, err := hkdf.Key(sha256.New, key[:], salt, "helmr checkpoint v1", 2*KeySize)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(sub[:KeySize])
	if err != nil {
		return nil, err
	}
	a, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sk := &streamKeys{aead: a}
	m := hmac.New(sha256.New, sub[KeySize:])
	m.Write([]byte("key check"))
	copy(sk.check[:], m.Sum(nil))
	return sk, nil
}

func chunkNonce(prefix []byte, i uint64) []byte {
	n := make([]byte, 12)
	copy(n, prefix)
	binary.BigEndian.PutUint64(n[prefixLen:], i)
	return n
}

func chunkAAD(id string, prefix []byte, i uint64, final bool) []byte {
	aad := make([]byte, 0, len(magic)+len(id)+prefixLen+9+2)
	aad = append(aad, magic...)
	aad = binary.BigEndian.AppendUint16(aad, uint16(len(id)))
	aad = append(aad, id...)
	aad = append(aad, prefix...)
	aad = binary.BigEndian.AppendUint64(aad, i)
	if final {
		return append(aad, 1)
	}
	return append(aad, 0)
}

// Seal reads r to its end and writes it to w sealed under key for
// checkpoint id, one chunk at a time. It returns the bytes written.
func Seal(w io.Writer, r io.Reader, key Key, id string) (int64, error) {
	var hdr [headerLen]byte
	copy(hdr[:], magic)
	salt := hdr[len(magic) : len(magic)+saltLen]
	prefix := hdr[len(magic)+saltLen : len(magic)+saltLen+prefixLen]
	if _, err := rand.Read(hdr[len(magic) : len(magic)+saltLen+prefixLen]); err != nil {
		return 0, err
	}
	sk, err := deriveKeys(key, salt)
	if err != nil {
		return 0, err
	}
	copy(hdr[headerLen-checkLen:], sk.check[:])
	cw := &countWriter{w: w}
	if _, err := cw.Write(hdr[:]); err != nil {
		return cw.n, fmt.Errorf("seal checkpoint: %w", err)
	}
	// One chunk is read ahead so that the last one is known as final.
	br := bufio.NewReaderSize(r, ChunkSize)
	cur := make([]byte, ChunkSize)
	out := make([]byte, 0, chunkHdrLen+maxSealed)
	for i := uint64(0); ; i++ {
		n, err := io.ReadFull(br, cur)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return cw.n, fmt.Errorf("seal checkpoint: read: %w", err)
		}
		final := err != nil
		if !final {
			if _, perr := br.Peek(1); perr != nil {
				if !errors.Is(perr, io.EOF) {
					return cw.n, fmt.Errorf("seal checkpoint: read: %w", perr)
				}
				final = true
			}
		}
		out = out[:chunkHdrLen]
		if final {
			out[0] = 1
		} else {
			out[0] = 0
		}
		out = sk.aead.Seal(out, chunkNonce(prefix, i), cur[:n], chunkAAD(id, prefix, i, final))
		binary.BigEndian.PutUint32(out[1:chunkHdrLen], uint32(len(out)-chunkHdrLen))
		if _, err := cw.Write(out); err != nil {
			return cw.n, fmt.Errorf("seal checkpoint: %w", err)
		}
		if final {
			return cw.n, nil
		}
	}
}

// Open reads a stream Seal wrote for checkpoint id and writes its
// plaintext to w, each chunk only once it is authenticated. On an error
// (ErrWrongKey, ErrTampered, ErrTruncated, ErrNotSealed or a read error) w
// may hold a prefix of the plaintext, which the caller must discard.
func Open(w io.Writer, r io.Reader, key Key, id string) error {
	br := bufio.NewReaderSize(r, chunkHdrLen+maxSealed)
	var hdr [headerLen]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("open checkpoint %s: %w (%d-byte header missing)", id, ErrNotSealed, headerLen)
		}
		return fmt.Errorf("open checkpoint %s: %w", id, err)
	}
	if string(hdr[:len(magic)]) != magic {
		return fmt.Errorf("open checkpoint %s: %w", id, ErrNotSealed)
	}
	salt := hdr[len(magic) : len(magic)+saltLen]
	prefix := hdr[len(magic)+saltLen : len(magic)+saltLen+prefixLen]
	sk, err := deriveKeys(key, salt)
	if err != nil {
		return err
	}
	if !hmac.Equal(sk.check[:], hdr[headerLen-checkLen:]) {
		return fmt.Errorf("open checkpoint %s: %w", id, ErrWrongKey)
	}
	buf := make([]byte, chunkHdrLen+maxSealed)
	var plain []byte
	for i := uint64(0); ; i++ {
		if _, err := io.ReadFull(br, buf[:chunkHdrLen]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("open checkpoint %s: %w: no final chunk after %d", id, ErrTruncated, i)
			}
			return fmt.Errorf("open checkpoint %s: %w", id, err)
		}
		final := buf[0] == 1
		n := binary.BigEndian.Uint32(buf[1:chunkHdrLen])
		if buf[0] > 1 || n < 16 || n > maxSealed {
			return fmt.Errorf("open checkpoint %s: %w: chunk %d header", id, ErrTampered, i)
		}
		ct := buf[chunkHdrLen : chunkHdrLen+int(n)]
		if _, err := io.ReadFull(br, ct); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("open checkpoint %s: %w: chunk %d cut short", id, ErrTruncated, i)
			}
			return fmt.Errorf("open checkpoint %s: %w", id, err)
		}
		plain, err = sk.aead.Open(plain[:0], chunkNonce(prefix, i), ct, chunkAAD(id, prefix, i, final))
		if err != nil {
			return fmt.Errorf("open checkpoint %s: %w: chunk %d", id, ErrTampered, i)
		}
		if _, err := w.Write(plain); err != nil {
			return fmt.Errorf("open checkpoint %s: %w", id, err)
		}
		if final {
			if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
				return fmt.Errorf("open checkpoint %s: %w: data after the final chunk", id, ErrTampered)
			}
			return nil
		}
	}
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
