package main

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ports(t *testing.T) map[platform]bool {
	t.Helper()
	p, err := goPorts()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTheRepositorysConfigBuildsTheScaffoldingMatrix(t *testing.T) {
	t.Parallel()
	p := ports(t)
	c, err := parseConfig([]byte(readRepoFile(t, ".goreleaser.yml")), p)
	if err != nil {
		t.Fatal(err)
	}
	// darwin/arm is not a Go port, and goreleaser leaves it out too.
	got := strings.Fields(targetList(c.Builds[0].targets(p)))
	want := []string{
		"freebsd/amd64", "freebsd/386", "freebsd/armv6", "freebsd/arm64",
		"windows/amd64", "windows/386", "windows/arm64",
		"linux/amd64", "linux/386", "linux/armv6", "linux/arm64",
		"darwin/amd64", "darwin/arm64",
	}
	if !slices.Equal(got, want) {
		t.Errorf("targets = %v\nwant      %v", got, want)
	}
	ld, err := c.Builds[0].expandLdflags("1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	if ld != "-s -w -X main.version=1.2.3" {
		t.Errorf("ldflags = %q", ld)
	}
}

func TestParseConfigRefusesWhatTheRegistryWouldNotAccept(t *testing.T) {
	t.Parallel()
	good := readRepoFile(t, ".goreleaser.yml")
	p := ports(t)
	for _, tc := range []struct{ name, old, new, want string }{
		{"cgo", "- CGO_ENABLED=0", "- CGO_ENABLED=1", "CGO_ENABLED=0"},
		{"binary name", "binary: '{{ .ProjectName }}_v{{ .Version }}'", "binary: '{{ .ProjectName }}'", "binary is"},
		{"archive format", "- zip", "- tar.gz", "one zip per platform"},
		{"checksum name", "_SHA256SUMS'", "_checksums.txt'", "_SHA256SUMS"},
		{"signature", `"--detach-sign"`, `"--clear-sign"`, "detached signature"},
		{"empty matrix", "    goos:\n      - freebsd\n      - windows\n      - linux\n      - darwin\n", "", "matrix is empty"},
	} {
		if !strings.Contains(good, tc.old) {
			t.Fatalf("%s: .goreleaser.yml lacks %q; update the test", tc.name, tc.old)
		}
		_, err := parseConfig([]byte(strings.Replace(good, tc.old, tc.new, 1)), p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one that says %q", tc.name, err, tc.want)
		}
	}
	// The manifest must go both beside the checksums and into the release.
	noManifest := strings.Replace(good, "release:\n  extra_files:\n    - glob: 'terraform-registry-manifest.json'", "release:\n  extra_files:\n    - glob: 'README.md'", 1)
	if _, err := parseConfig([]byte(noManifest), p); err == nil || !strings.Contains(err.Error(), "release's extra_files") {
		t.Errorf("a release without the manifest: err = %v", err)
	}
}

func TestExpandLdflagsRefusesOtherTemplates(t *testing.T) {
	t.Parallel()
	b := build{Ldflags: []string{"-X main.version={{.Version}} -X main.commit={{.Commit}}"}}
	if _, err := b.expandLdflags("1.2.3"); err == nil {
		t.Fatal("a {{.Commit}} left for go build was accepted")
	}
}

func TestParseManifest(t *testing.T) {
	t.Parallel()
	got, err := parseManifest([]byte(readRepoFile(t, "terraform-registry-manifest.json")))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"6.0"}) {
		t.Errorf("the repository's manifest lists %v, want [6.0] (main.go serves protocol 6)", got)
	}
	for _, bad := range []string{
		`{"version": 2, "metadata": {"protocol_versions": ["6.0"]}}`,
		`{"version": 1, "metadata": {"protocol_versions": []}}`,
		`{"version": 1, "metadata": {"protocol_versions": ["6"]}}`,
		`{"version": 1, "metadata": {"protocol_version": ["6.0"]}}`,
		`{"version": 1, "metadata": {"protocol_versions": ["6.0"]}} {}`,
		`{"version": 1,`,
	} {
		if _, err := parseManifest([]byte(bad)); err == nil {
			t.Errorf("parseManifest(%s) accepted it", bad)
		}
	}
}

func TestProtocolOf(t *testing.T) {
	t.Parallel()
	got, err := protocolOf("1|6|unix|/tmp/plugin123|grpc|")
	if err != nil || got != "6.0" {
		t.Errorf("protocolOf = %q, %v; want 6.0", got, err)
	}
	if _, err := protocolOf("This binary is a plugin. These are not meant to be executed directly."); err == nil {
		t.Error("a line that is not a handshake was read as one")
	}
}
