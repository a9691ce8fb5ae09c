package agent

import (
	"encoding/binary"
	"fmt"
)

// Data frames: a process's stdin and output move as binary frames, not
// JSON, whose base64 and scanning cost more than the copies they carry
// (JSON frames topped out near 60-80 MB/s; files stream through these).
// A binary frame's payload starts with binaryMark, which no JSON object
// does, then its kind, the exec's id (big endian) and a flag byte:
//
//	0x00 kind id[8] flags data...
//
// kind 1 is Stdin (flags bit 0: EOF), kind 2 Output (flags 0: stdout, 1:
// stderr). The guest always sends Output so (the host it runs with reads
// both kinds of frame); the host sends Stdin so only to an agent whose
// ready said it reads them (Ready.Binary): a sandbox restored from an
// older checkpoint gets JSON.
const binaryMark = 0x00

const (
	binStdin  = 1
	binOutput = 2
	binHeader = 11
)

// encodeBinary returns m as a binary frame, for the messages that have
// one.
func encodeBinary(m Msg) ([]byte, bool) {
	var kind, flags byte
	var id uint64
	var data []byte
	switch m := m.(type) {
	case *Output:
		kind, id, data = binOutput, m.ID, m.Data
		switch m.Stream {
		case Stdout:
		case Stderr:
			flags = 1
		default:
			return nil, false
		}
	case *Stdin:
		kind, id, data = binStdin, m.ID, m.Data
		if m.EOF {
			flags = 1
		}
	default:
		return nil, false
	}
	b := make([]byte, binHeader+len(data))
	b[0], b[1] = binaryMark, kind
	binary.BigEndian.PutUint64(b[2:10], id)
	b[10] = flags
	copy(b[binHeader:], data)
	return b, true
}

// decodeBinary parses a binary frame's payload; its data aliases it.
func decodeBinary(payload []byte) (Msg, error) {
	if len(payload) < binHeader {
		return nil, fmt.Errorf("decode binary frame of %d bytes: too short", len(payload))
	}
	id, flags, data := binary.BigEndian.Uint64(payload[2:10]), payload[10], payload[binHeader:]
	switch payload[1] {
	case binStdin:
		return &Stdin{ID: id, Data: data, EOF: flags&1 != 0}, nil
	case binOutput:
		stream := Stdout
		if flags&1 != 0 {
			stream = Stderr
		}
		return &Output{ID: id, Stream: stream, Data: data}, nil
	}
	return nil, fmt.Errorf("decode binary frame kind %d: %w", payload[1], ErrUnknownType)
}
