package provider

import "testing"

func TestVersionAtLeast(t *testing.T) {
	for _, c := range []struct {
		version string
		want    bool
	}{
		{"3.10.8", false},
		{"3.12.14", false},
		{"3.13.0", true},
		{"3.13.7", true},
		{"4.0.5", true},
		{"4.3.0-rc.1", true},
		{"10.0.0", true},
		{"2.8.1", false},
		{"", true},      // unreadable: ask the broker
		{"0.0.0", true}, // a development build: ask the broker
		{"garbage", true},
	} {
		if got := versionAtLeast(c.version, 3, 13); got != c.want {
			t.Errorf("versionAtLeast(%q, 3, 13) = %t, want %t", c.version, got, c.want)
		}
	}
}
