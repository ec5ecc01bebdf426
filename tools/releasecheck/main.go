// Command releasecheck proves, without goreleaser, that a release of the
// provider would build and that the registry would accept it: it reads
// .goreleaser.yml, checks the parts the Terraform Registry depends on,
// cross-compiles the provider for every platform of the build matrix with
// GOOS/GOARCH, and checks terraform-registry-manifest.json against the plugin
// protocol the provider binary itself announces.
//
// Run it from the module root: go run ./tools/releasecheck
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "releasecheck:", err)
		os.Exit(1)
	}
}

func run() error {
	raw, err := os.ReadFile(".goreleaser.yml")
	if err != nil {
		return err
	}
	ports, err := goPorts()
	if err != nil {
		return err
	}
	cfg, err := parseConfig(raw, ports)
	if err != nil {
		return err
	}
	b := &cfg.Builds[0]
	targets := b.targets(ports)
	manifest, err := os.ReadFile("terraform-registry-manifest.json")
	if err != nil {
		return err
	}
	protocols, err := parseManifest(manifest)
	if err != nil {
		return fmt.Errorf("terraform-registry-manifest.json: %w", err)
	}

	dir, err := os.MkdirTemp("", "releasecheck")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ldflags, err := b.expandLdflags("0.0.0-releasecheck")
	if err != nil {
		return err
	}
	start := time.Now()
	var host string
	for _, tg := range targets {
		out := filepath.Join(dir, tg.goos+"_"+tg.goarch, "terraform-provider-queuey")
		args := append([]string{"build"}, b.Flags...)
		args = append(args, "-ldflags", ldflags, "-o", out, ".")
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), append(b.Env, tg.env()...)...)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build for %s: %v\n%s", tg, err, msg)
		}
		if tg.goos == runtime.GOOS && tg.goarch == runtime.GOARCH {
			host = out
		}
	}
	fmt.Printf("release: built the provider for %d platforms in %s: %s\n", len(targets), time.Since(start).Round(time.Second), targetList(targets))
	if host == "" {
		return fmt.Errorf("the build matrix has no %s/%s binary to ask for its protocol", runtime.GOOS, runtime.GOARCH)
	}
	served, err := handshakeProtocol(host)
	if err != nil {
		return err
	}
	if !slices.Contains(protocols, served) {
		return fmt.Errorf("terraform-registry-manifest.json lists protocol_versions %q, but the provider serves %s", protocols, served)
	}
	fmt.Printf("release: terraform-registry-manifest.json lists protocol %s, which the provider serves\n", served)
	return nil
}

// config is the part of .goreleaser.yml this check reads.
type config struct {
	ProjectName string  `yaml:"project_name"`
	Builds      []build `yaml:"builds"`
	Archives    []struct {
		Formats      []string `yaml:"formats"`
		NameTemplate string   `yaml:"name_template"`
	} `yaml:"archives"`
	Checksum struct {
		NameTemplate string      `yaml:"name_template"`
		Algorithm    string      `yaml:"algorithm"`
		ExtraFiles   []extraFile `yaml:"extra_files"`
	} `yaml:"checksum"`
	Signs []struct {
		Artifacts string   `yaml:"artifacts"`
		Args      []string `yaml:"args"`
	} `yaml:"signs"`
	Release struct {
		ExtraFiles []extraFile `yaml:"extra_files"`
	} `yaml:"release"`
}

type extraFile struct {
	Glob         string `yaml:"glob"`
	NameTemplate string `yaml:"name_template"`
}

type build struct {
	Env     []string   `yaml:"env"`
	Flags   []string   `yaml:"flags"`
	Ldflags []string   `yaml:"ldflags"`
	Goos    []string   `yaml:"goos"`
	Goarch  []string   `yaml:"goarch"`
	Goarm   []string   `yaml:"goarm"`
	Ignore  []platform `yaml:"ignore"`
	Binary  string     `yaml:"binary"`
}

type platform struct {
	Goos   string `yaml:"goos"`
	Goarch string `yaml:"goarch"`
}

const manifestGlob = "terraform-registry-manifest.json"

// parseConfig decodes .goreleaser.yml and checks what the registry relies
// on: a zip per platform named name_version_os_arch holding
// terraform-provider-queuey_vVERSION, SHA256SUMS with its detached signature,
// and the manifest beside them, built without cgo.
func parseConfig(raw []byte, ports map[platform]bool) (*config, error) {
	var c config
	if err := yaml.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf(".goreleaser.yml: %w", err)
	}
	var errs []error
	check := func(ok bool, format string, a ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(".goreleaser.yml: "+format, a...))
		}
	}
	check(c.ProjectName == "terraform-provider-queuey", "project_name is %q, want terraform-provider-queuey", c.ProjectName)
	check(len(c.Builds) == 1, "has %d builds, want 1", len(c.Builds))
	for _, b := range c.Builds {
		check(slices.Contains(b.Env, "CGO_ENABLED=0"), "the build's env lacks CGO_ENABLED=0")
		check(b.Binary == "{{ .ProjectName }}_v{{ .Version }}", "binary is %q; the registry wants {{ .ProjectName }}_v{{ .Version }}", b.Binary)
		check(len(b.targets(ports)) > 0, "the build matrix is empty")
	}
	check(len(c.Archives) == 1 && slices.Equal(c.Archives[0].Formats, []string{"zip"}), "archives must be one zip per platform")
	for _, a := range c.Archives {
		check(a.NameTemplate == "{{ .ProjectName }}_{{ .Version }}_{{ .Os }}_{{ .Arch }}", "the archive name_template is %q", a.NameTemplate)
	}
	check(c.Checksum.Algorithm == "sha256", "checksum algorithm is %q, want sha256", c.Checksum.Algorithm)
	check(strings.HasSuffix(c.Checksum.NameTemplate, "_SHA256SUMS"), "the checksum file %q must end in _SHA256SUMS", c.Checksum.NameTemplate)
	signed := false
	for _, s := range c.Signs {
		signed = signed || s.Artifacts == "checksum" && slices.Contains(s.Args, "--detach-sign")
	}
	check(signed, "no detached signature of the checksum file (signs: artifacts: checksum, --detach-sign)")
	hasManifest := func(files []extraFile) bool {
		return slices.ContainsFunc(files, func(f extraFile) bool {
			return f.Glob == manifestGlob && f.NameTemplate == "{{ .ProjectName }}_{{ .Version }}_manifest.json"
		})
	}
	check(hasManifest(c.Checksum.ExtraFiles), "the checksum's extra_files lack %s as {{ .ProjectName }}_{{ .Version }}_manifest.json", manifestGlob)
	check(hasManifest(c.Release.ExtraFiles), "the release's extra_files lack %s as {{ .ProjectName }}_{{ .Version }}_manifest.json", manifestGlob)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &c, nil
}

// target is one platform of the matrix.
type target struct{ goos, goarch, goarm string }

func (t target) String() string {
	if t.goarm != "" {
		return t.goos + "/" + t.goarch + "v" + t.goarm
	}
	return t.goos + "/" + t.goarch
}

func (t target) env() []string {
	env := []string{"GOOS=" + t.goos, "GOARCH=" + t.goarch}
	if t.goarm != "" {
		env = append(env, "GOARM="+t.goarm)
	}
	return env
}

// targets is goos × goarch (× goarm for arm) without the ignored pairs and
// the pairs Go has no port for (darwin/arm), as goreleaser expands it.
// goreleaser builds arm as ARMv6 unless goarm says otherwise.
func (b *build) targets(ports map[platform]bool) []target {
	arms := b.Goarm
	if len(arms) == 0 {
		arms = []string{"6"}
	}
	var out []target
	for _, goos := range b.Goos {
		for _, goarch := range b.Goarch {
			if !ports[platform{goos, goarch}] || slices.Contains(b.Ignore, platform{goos, goarch}) {
				continue
			}
			if goarch != "arm" {
				out = append(out, target{goos: goos, goarch: goarch})
				continue
			}
			for _, arm := range arms {
				out = append(out, target{goos: goos, goarch: goarch, goarm: arm})
			}
		}
	}
	return out
}

// expandLdflags fills in the one template the ldflags may use, and refuses
// any other: goreleaser would fill it in, go build would not.
func (b *build) expandLdflags(version string) (string, error) {
	s := strings.Join(b.Ldflags, " ")
	for _, v := range []string{"{{.Version}}", "{{ .Version }}"} {
		s = strings.ReplaceAll(s, v, version)
	}
	if strings.Contains(s, "{{") {
		return "", fmt.Errorf(".goreleaser.yml: ldflags %q use a template this check cannot fill in", s)
	}
	return s, nil
}

// goPorts is what `go tool dist list` says Go can build for.
func goPorts() (map[platform]bool, error) {
	out, err := exec.Command("go", "tool", "dist", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("go tool dist list: %w", err)
	}
	ports := map[platform]bool{}
	for _, l := range strings.Fields(string(out)) {
		if goos, goarch, ok := strings.Cut(l, "/"); ok {
			ports[platform{goos, goarch}] = true
		}
	}
	return ports, nil
}

func targetList(ts []target) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.String()
	}
	return strings.Join(s, " ")
}

// parseManifest returns the protocol versions of a registry manifest, and
// refuses one the registry would not read: unknown fields, another format
// version, no protocols, or a protocol that is not "N.0".
func parseManifest(raw []byte) ([]string, error) {
	var m struct {
		Version  int `json:"version"`
		Metadata struct {
			ProtocolVersions []string `json:"protocol_versions"`
		} `json:"metadata"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	if m.Version != 1 {
		return nil, fmt.Errorf("version is %d, want 1", m.Version)
	}
	if len(m.Metadata.ProtocolVersions) == 0 {
		return nil, errors.New("metadata.protocol_versions is empty")
	}
	for _, p := range m.Metadata.ProtocolVersions {
		if p != "5.0" && p != "6.0" {
			return nil, fmt.Errorf("protocol version %q: the registry knows 5.0 and 6.0", p)
		}
	}
	return m.Metadata.ProtocolVersions, nil
}

// handshakeProtocol starts the provider binary as Terraform does and reads
// the plugin protocol it picks from its handshake line
// ("1|6|unix|/tmp/plugin...|grpc|"), offering both 5 and 6 as Terraform does.
func handshakeProtocol(bin string) (string, error) {
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"TF_PLUGIN_MAGIC_COOKIE=d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2",
		"PLUGIN_PROTOCOL_VERSIONS=5,6")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Scan()
		line <- sc.Text()
	}()
	select {
	case l := <-line:
		return protocolOf(l)
	case <-time.After(30 * time.Second):
		return "", errors.New("the provider wrote no handshake within 30s")
	}
}

func protocolOf(handshake string) (string, error) {
	f := strings.Split(handshake, "|")
	if len(f) < 5 || f[0] != "1" {
		return "", fmt.Errorf("the provider's handshake %q is not go-plugin's", handshake)
	}
	return f[1] + ".0", nil
}
