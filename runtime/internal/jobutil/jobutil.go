// Package jobutil holds the small pieces of job handling that the runtime
// (package queuey) and its test double (queueytest) must do identically.
package jobutil

import (
	"crypto/rand"
	"encoding/hex"
	"reflect"
)

// NewID returns a random (version 4) UUID, the id of every new job. Written
// out rather than imported: it is a dozen lines of crypto/rand.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	// Hex into one buffer: fmt.Sprintf of the five groups cost six
	// allocations, on every Enqueue.
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return string(s[:])
}

// Zero returns a usable zero T: for a pointer type, a pointer to a zero
// value, so that methods with value receivers (a job's Kind and Queue) do
// not dereference nil, and so that JSON decodes into it.
func Zero[T any]() T {
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer {
		return reflect.New(t.Elem()).Interface().(T)
	}
	var zero T
	return zero
}
