// Package provider is the queuey Terraform provider: it provisions queuey
// queue sets (work queues and their dead-letter queues) on RabbitMQ through
// the management HTTP API.
//
// Queue names, arguments and name checks come from the shared topology
// package, the same code the queuey runtime declares queues with, so a set
// that Terraform made and a process that declares it at start-up agree to the
// argument.
package provider

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	amqp "github.com/rabbitmq/amqp091-go"
)

var _ provider.Provider = (*queueyProvider)(nil)

// Defaults of the provider settings. They match a RabbitMQ freshly installed
// on the machine Terraform runs on, where the guest user may log in.
const (
	defaultEndpoint = "http://127.0.0.1:15672"
	defaultUsername = "guest"
	defaultPassword = "guest"
	// requestTimeout bounds every management API request, so that a broker
	// that accepts connections but never answers cannot hang a plan.
	requestTimeout = 30 * time.Second
)

// settingEnv lists, per provider setting, the environment variables read when
// the setting is not in the configuration, first match wins. The RABBITMQ_*
// names are the ones other RabbitMQ providers use.
var settingEnv = map[string][]string{
	"endpoint":         {"QUEUEY_ENDPOINT", "RABBITMQ_ENDPOINT"},
	"username":         {"QUEUEY_USERNAME", "RABBITMQ_USERNAME"},
	"password":         {"QUEUEY_PASSWORD", "RABBITMQ_PASSWORD"},
	"amqp_url":         {"QUEUEY_AMQP_URL"},
	"ca_file":          {"QUEUEY_CA_FILE"},
	"client_cert_file": {"QUEUEY_CLIENT_CERT_FILE"},
	"client_key_file":  {"QUEUEY_CLIENT_KEY_FILE"},
	"insecure":         {"QUEUEY_INSECURE"},
}

// New returns a function that builds the queuey provider at version, the
// shape providerserver.Serve and the acceptance tests expect.
func New(version string) func() provider.Provider {
	return func() provider.Provider {
		return &queueyProvider{version: version}
	}
}

type queueyProvider struct {
	version string
}

type providerModel struct {
	Endpoint       types.String `tfsdk:"endpoint"`
	Username       types.String `tfsdk:"username"`
	Password       types.String `tfsdk:"password"`
	AMQPURL        types.String `tfsdk:"amqp_url"`
	CAFile         types.String `tfsdk:"ca_file"`
	ClientCertFile types.String `tfsdk:"client_cert_file"`
	ClientKeyFile  types.String `tfsdk:"client_key_file"`
	Insecure       types.Bool   `tfsdk:"insecure"`
}

// providerData is what Configure hands to every resource.
type providerData struct {
	broker *broker
	// amqpURL and amqpConfig reach the same broker over AMQP, for the
	// lossless migration of argument changes, which moves messages: the
	// management API can only peek at them.
	amqpURL    string
	amqpConfig *amqp.Config
}

func (p *queueyProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "queuey"
	resp.Version = p.version
}

func (p *queueyProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	env := func(name string) string {
		vars := settingEnv[name]
		quoted := make([]string, len(vars))
		for i, v := range vars {
			quoted[i] = "`" + v + "`"
		}
		return " Environment: " + strings.Join(quoted, ", ") + "."
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "The queuey provider provisions queuey queue sets on RabbitMQ through the management HTTP API. " +
			"Every setting may also come from an environment variable; the configuration wins.",
		Attributes: map[string]schema.Attribute{
			"endpoint": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "URL of the RabbitMQ management API, such as `https://rabbit.example.com:15671`; a trailing slash is fine. " +
					"For a cluster, the URLs of several nodes separated by commas, such as `https://rabbit1:15671,https://rabbit2:15671,https://rabbit3:15671`, all `http` or all `https`: " +
					"each request goes to the node that answered last (the first listed, to begin with), and to the next node when that one gives no answer or answers 502 or 503. " +
					"(default: `" + defaultEndpoint + "`)" + env("endpoint"),
			},
			"username": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "User for the management API; it needs the `management` tag and configure, write and read permissions on the virtual hosts it manages. " +
					"(default: `" + defaultUsername + "`, which RabbitMQ only lets in from localhost)" + env("username"),
			},
			"password": schema.StringAttribute{
				Optional:            true,
				Sensitive:           true,
				MarkdownDescription: "Password of `username`. (default: `" + defaultPassword + "`)" + env("password"),
			},
			"amqp_url": schema.StringAttribute{
				Optional:  true,
				Sensitive: true,
				MarkdownDescription: "AMQP URL of the same broker, such as `amqps://user:password@rabbit.example.com:5671/`, " +
					"over which a queue whose arguments change is migrated: its messages moved aside and back. " +
					"For a cluster it may list several hosts, such as `amqps://user:password@rabbit1:5671,rabbit2:5671/`; a migration uses the first that answers. " +
					"The virtual host of each queue set is used whatever the URL's path says, and the TLS settings below apply to `amqps` too. " +
					"A migration first checks that it reaches the cluster the endpoint manages (their cluster names), and refuses, changing nothing, when it does not. " +
					"(default: the endpoint's host with `username` and `password`, on port 5672, or `amqps` on 5671 when the endpoint is https; " +
					"with several endpoints, the host of each, in their order)" + env("amqp_url"),
			},
			"ca_file": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Path of a PEM file with the certificate authorities to trust for an `https` endpoint and an `amqps` `amqp_url`, instead of the system's." + env("ca_file"),
			},
			"client_cert_file": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Path of a PEM client certificate presented to an `https` endpoint and an `amqps` `amqp_url`; needs `client_key_file`." + env("client_cert_file"),
			},
			"client_key_file": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Path of the PEM private key of `client_cert_file`." + env("client_key_file"),
			},
			"insecure": schema.BoolAttribute{
				Optional:            true,
				MarkdownDescription: "Skip verifying the TLS certificate of the endpoint and of an `amqps` `amqp_url`. Only for testing. (default: `false`)" + env("insecure"),
			},
		},
	}
}

func (p *queueyProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var cfg providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}

	// A setting that depends on a resource not yet created is unknown during
	// plan. Leave the provider unconfigured then: resources say so if they
	// need the broker, and the apply, when values are known, configures it.
	for _, v := range []types.String{cfg.Endpoint, cfg.Username, cfg.Password, cfg.AMQPURL, cfg.CAFile, cfg.ClientCertFile, cfg.ClientKeyFile} {
		if v.IsUnknown() {
			return
		}
	}
	if cfg.Insecure.IsUnknown() {
		return
	}

	endpoint := setting(cfg.Endpoint, "endpoint", defaultEndpoint)
	username := setting(cfg.Username, "username", defaultUsername)
	password := setting(cfg.Password, "password", defaultPassword)
	amqpURL := setting(cfg.AMQPURL, "amqp_url", "")
	caFile := setting(cfg.CAFile, "ca_file", "")
	certFile := setting(cfg.ClientCertFile, "client_cert_file", "")
	keyFile := setting(cfg.ClientKeyFile, "client_key_file", "")

	insecure := false
	if !cfg.Insecure.IsNull() {
		insecure = cfg.Insecure.ValueBool()
	} else if v := lookupEnv("insecure"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("insecure"), "Invalid Insecure Setting",
				fmt.Sprintf("The environment variable QUEUEY_INSECURE is %q; set it to true or false.", v))
			return
		}
		insecure = b
	}

	endpoints, problem := parseEndpoints(endpoint)
	if problem != "" {
		resp.Diagnostics.AddAttributeError(path.Root("endpoint"), "Invalid RabbitMQ Endpoint", problem)
		return
	}

	tlsConfig, err := buildTLS(caFile, certFile, keyFile, insecure)
	if err != nil {
		resp.Diagnostics.AddError("Invalid TLS Settings",
			"The provider could not load the TLS files it was given. Check ca_file, client_cert_file and client_key_file (or their QUEUEY_* environment variables).\n\n"+err.Error())
		return
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	if len(endpoints) > 1 {
		transport.DialContext = (&net.Dialer{Timeout: failoverDialTimeout, KeepAlive: 30 * time.Second}).DialContext
	}

	b, err := newBroker(endpoint, username, password, transport)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("endpoint"), "Invalid RabbitMQ Endpoint", err.Error())
		return
	}
	if amqpURL == "" {
		amqpURL = defaultAMQPURL(endpoints, username, password)
	}
	data := &providerData{broker: b, amqpURL: amqpURL, amqpConfig: &amqp.Config{TLSClientConfig: tlsConfig}}
	resp.ResourceData = data
	resp.DataSourceData = data
}

func (p *queueyProvider) Resources(_ context.Context) []func() resource.Resource {
	return []func() resource.Resource{NewQueueSetResource}
}

func (p *queueyProvider) DataSources(_ context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{NewQueueSetDataSource}
}

// setting resolves one string setting: the configuration, then its
// environment variables, then the default.
func setting(v types.String, name, def string) string {
	if !v.IsNull() && !v.IsUnknown() {
		return v.ValueString()
	}
	if e := lookupEnv(name); e != "" {
		return e
	}
	return def
}

func lookupEnv(name string) string {
	for _, k := range settingEnv[name] {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return ""
}

func buildTLS(caFile, certFile, keyFile string, insecure bool) (*tls.Config, error) {
	cfg := &tls.Config{InsecureSkipVerify: insecure} //nolint:gosec // the user asked for it, for testing
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("reading ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("client_cert_file and client_key_file go together: set both or neither")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("loading the client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// newRabbitClient builds the management API client every request goes
// through.
func newRabbitClient(endpoint, username, password string, transport http.RoundTripper) (*rabbithole.Client, error) {
	// rabbit-hole joins the endpoint and "/api/" itself, so a trailing
	// slash would make every path start with "//".
	endpoint = strings.TrimRight(endpoint, "/")
	c, err := rabbithole.NewTLSClient(endpoint, username, password, transport)
	if err != nil {
		return nil, err
	}
	c.SetTimeout(requestTimeout)
	return c, nil
}
