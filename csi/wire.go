// Protocol Buffers wire format, the part CSI's messages use: varints, 64-bit
// and 32-bit scalars (skipped), and length-delimited fields (strings, maps,
// nested messages). Written for feedfs-csi so that the plugin needs no
// generated code: each message in msg.go reads and writes its fields by the
// field numbers of the CSI spec's csi.proto, which are the wire format.
package main

import (
	"errors"
	"math"
)

const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

var errWire = errors.New("malformed protobuf message")

type encoder struct{ b []byte }

func (e *encoder) varint(v uint64) {
	for v >= 0x80 {
		e.b = append(e.b, byte(v)|0x80)
		v >>= 7
	}
	e.b = append(e.b, byte(v))
}

func (e *encoder) tag(num int, wt int) { e.varint(uint64(num)<<3 | uint64(wt)) }

// Scalars at their default (0, false, "") are not written, as proto3 does.
func (e *encoder) uint(num int, v uint64) {
	if v != 0 {
		e.tag(num, wireVarint)
		e.varint(v)
	}
}

func (e *encoder) int64(num int, v int64) { e.uint(num, uint64(v)) }

func (e *encoder) bool(num int, v bool) {
	if v {
		e.uint(num, 1)
	}
}

func (e *encoder) bytes(num int, v []byte) {
	e.tag(num, wireBytes)
	e.varint(uint64(len(v)))
	e.b = append(e.b, v...)
}

func (e *encoder) string(num int, v string) {
	if v != "" {
		e.bytes(num, []byte(v))
	}
}

// A message field is written even when empty: its presence means something
// (a oneof's choice, a BoolValue that is set).
func (e *encoder) message(num int, m marshaler) { e.bytes(num, m.marshal()) }

// map<string, string>: one entry message per pair, key 1, value 2.
func (e *encoder) stringMap(num int, m map[string]string) {
	for k, v := range m {
		var ent encoder
		ent.string(1, k)
		ent.string(2, v)
		e.bytes(num, ent.b)
	}
}

type marshaler interface{ marshal() []byte }

// field is one field read from a message: its number, wire type and value
// (val for varints, data for length-delimited fields).
type field struct {
	num  int
	wt   int
	val  uint64
	data []byte
}

func readVarint(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * uint(i))
		if b[i] < 0x80 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errWire
}

// fields calls fn for each field of b in order; unknown fields are the
// caller's to ignore (fn returns nil for them), as protobuf requires.
func fields(b []byte, fn func(f field) error) error {
	for len(b) > 0 {
		key, n, err := readVarint(b)
		if err != nil {
			return err
		}
		b = b[n:]
		f := field{num: int(key >> 3), wt: int(key & 7)}
		if f.num <= 0 || f.num > math.MaxInt32 {
			return errWire
		}
		switch f.wt {
		case wireVarint:
			f.val, n, err = readVarint(b)
			if err != nil {
				return err
			}
		case wireFixed64:
			n = 8
		case wireFixed32:
			n = 4
		case wireBytes:
			l, m, err := readVarint(b)
			if err != nil || l > uint64(len(b)-m) {
				return errWire
			}
			f.data = b[m : m+int(l)]
			n = m + int(l)
		default: // groups (3, 4) are not in proto3
			return errWire
		}
		if n > len(b) {
			return errWire
		}
		b = b[n:]
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

// asString and the other accessors check the wire type, so that a field
// sent with the wrong type is an error rather than a silent zero.
func (f field) asString() (string, error) {
	if f.wt != wireBytes {
		return "", errWire
	}
	return string(f.data), nil
}

func (f field) asVarint() (uint64, error) {
	if f.wt != wireVarint {
		return 0, errWire
	}
	return f.val, nil
}

func (f field) asMessage() ([]byte, error) {
	if f.wt != wireBytes {
		return nil, errWire
	}
	return f.data, nil
}

// mapEntry adds one map<string, string> entry to m (a later duplicate key
// wins, as protobuf says).
func (f field) mapEntry(m map[string]string) error {
	b, err := f.asMessage()
	if err != nil {
		return err
	}
	var k, v string
	err = fields(b, func(e field) error {
		var err error
		switch e.num {
		case 1:
			k, err = e.asString()
		case 2:
			v, err = e.asString()
		}
		return err
	})
	if err != nil {
		return err
	}
	m[k] = v
	return nil
}
