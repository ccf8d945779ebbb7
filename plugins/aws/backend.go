package aws

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/netguard"
	"gpud.dev/gpud/plugins"
)

// Version is this backend's own version, for `gpud backend list`.
const Version = "0.1.0"

// Backend makes EC2 machines that join gpud's fleets.
type Backend struct {
	cfg     Config
	log     zerolog.Logger
	catalog []catalogEntry
	clients map[string]*ec2.Client // by region
	live    livePrices             // AWS's current prices over the catalog's (pricing.go)
	stop    context.CancelFunc
}

var (
	_ plugins.Backend        = (*Backend)(nil)
	_ plugins.InstanceLister = (*Backend)(nil)
)

// New checks cfg without reaching EC2 and returns the backend; Check is
// the call that reaches it.
func New(cfg Config, log zerolog.Logger) (*Backend, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cat, err := catalog()
	if err != nil {
		return nil, err
	}
	b := &Backend{cfg: cfg, log: log, catalog: cat, clients: map[string]*ec2.Client{}}
	hc := &http.Client{Transport: transport(cfg.DenyServerNetwork)}
	creds := credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)
	for _, region := range cfg.Regions {
		opts := ec2.Options{Region: region, Credentials: aws.NewCredentialsCache(creds), HTTPClient: hc, Retryer: retryer()}
		if cfg.EndpointURL != "" {
			opts.BaseEndpoint = aws.String(cfg.EndpointURL)
		}
		b.clients[region] = ec2.New(opts)
	}
	ctx, stop := context.WithCancel(context.Background())
	b.stop = stop
	go b.refreshLoop(ctx)
	return b, nil
}

// Close stops the price refresh New started.
func (b *Backend) Close() { b.stop() }

// retryer is the SDK's standard retryer (3 attempts, backoff) that does
// not retry a no-capacity answer: the server tries another offer instead,
// at once, and backs this one off.
func retryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = 3
		o.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(func(err error) aws.Ternary {
			var ae smithy.APIError
			if errors.As(err, &ae) && slices.Contains(noCapacityCodes, ae.ErrorCode()) {
				return aws.FalseTernary
			}
			return aws.UnknownTernary
		})}, o.Retryables...)
	})
}

// transport is the HTTP transport of the EC2 clients; deny refuses the
// server host's own and link-local addresses at every connection.
func transport(deny bool) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if deny {
		d.Control = netguard.Control
	}
	t.DialContext = d.DialContext
	t.Proxy = nil // the server's proxy environment is not the project's
	return t
}

// Info implements plugins.Backend: an instance backend.
func (b *Backend) Info(context.Context) (plugins.Info, error) {
	return plugins.Info{Type: "aws", Protocol: plugins.ProtocolVersion, Instances: true, Version: Version}, nil
}

func (b *Backend) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, time.Duration(b.cfg.TimeoutSeconds)*time.Second)
}

// Check reaches EC2 with the credentials in every region (DescribeRegions
// lists the regions the account may use), and resolves the image: a wrong
// endpoint, refused credentials, a region the account cannot use or an
// image that does not exist fail here, at `gpud backend add`.
func (b *Backend) Check(ctx context.Context) error {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	for _, region := range b.cfg.Regions {
		out, err := b.clients[region].DescribeRegions(ctx, &ec2.DescribeRegionsInput{RegionNames: []string{region}})
		if err != nil {
			return b.callError("check credentials (DescribeRegions)", region, err)
		}
		if !slices.ContainsFunc(out.Regions, func(r ec2Region) bool { return aws.ToString(r.RegionName) == region }) {
			return fmt.Errorf("aws backend: regions: %s is not enabled for this account (DescribeRegions did not list it)", region)
		}
		if _, err := b.image(ctx, region); err != nil {
			return err
		}
	}
	return nil
}

// callError names the call, the region and, for the errors a user fixes
// in the configuration, the field.
func (b *Backend) callError(what, region string, err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch code := ae.ErrorCode(); {
		case code == "AuthFailure" || code == "UnrecognizedClientException" || code == "InvalidClientTokenId" || code == "SignatureDoesNotMatch":
			return fmt.Errorf("aws backend: %s in %s: EC2 refused the credentials (%s): check access_key_id and secret_access_key: %s", what, region, code, ae.ErrorMessage())
		case code == "UnauthorizedOperation":
			return fmt.Errorf("aws backend: %s in %s: the credentials may not do this (UnauthorizedOperation): grant the IAM permissions docs/backends.md lists: %s", what, region, ae.ErrorMessage())
		default:
			return fmt.Errorf("aws backend: %s in %s: %s: %s", what, region, code, ae.ErrorMessage())
		}
	}
	where := "EC2's endpoint"
	if b.cfg.EndpointURL != "" {
		where = "endpoint_url " + b.cfg.EndpointURL
	}
	return fmt.Errorf("aws backend: %s in %s: cannot reach %s: %w", what, region, where, err)
}

// Offers implements plugins.Backend: every catalog type in every region,
// on demand and spot, cheapest first, at AWS's current prices where a
// refresh got them (PriceSource), else the catalog's.
func (b *Backend) Offers(_ context.Context, q plugins.OfferQuery) ([]api.Offer, error) {
	var out []api.Offer
	for _, region := range b.cfg.Regions {
		if q.Region != "" && q.Region != region {
			continue
		}
		for _, e := range b.catalog {
			if q.GPUs > 0 && e.GPUs < q.GPUs || q.GPUName != "" && !gpuNameMatches(e.GPUName, q.GPUName) {
				continue
			}
			for _, spot := range []bool{false, true} {
				if q.Spot != nil && *q.Spot != spot {
					continue
				}
				o := e.offer(region, spot)
				o.Price = b.price(region, e, spot)
				out = append(out, o)
			}
		}
	}
	slices.SortStableFunc(out, func(x, y api.Offer) int {
		switch {
		case x.Price < y.Price:
			return -1
		case x.Price > y.Price:
			return 1
		}
		return strings.Compare(x.Instance+x.Region, y.Instance+y.Region)
	})
	return out, nil
}

// gpuNameMatches compares a catalog model (A10G) with a query's names,
// comma-separated, case-insensitively.
func gpuNameMatches(model, want string) bool {
	for _, w := range strings.Split(want, ",") {
		if strings.EqualFold(strings.TrimSpace(w), model) {
			return true
		}
	}
	return false
}

// The job methods: an instance backend runs no jobs itself.

// StartGang implements plugins.Backend.
func (b *Backend) StartGang(context.Context, plugins.Gang) error { return plugins.ErrUnsupported }

// Status implements plugins.Backend.
func (b *Backend) Status(context.Context, string) ([]api.JobStatus, error) {
	return nil, plugins.ErrUnsupported
}

// List implements plugins.Backend: no gangs.
func (b *Backend) List(context.Context) ([]string, error) { return nil, nil }

// Stop implements plugins.Backend.
func (b *Backend) Stop(context.Context, string, time.Duration) error { return plugins.ErrUnsupported }

// Logs implements plugins.Backend.
func (b *Backend) Logs(context.Context, string, bool, func(api.JobLogEntry) error) error {
	return plugins.ErrUnsupported
}

// CreateVolume implements plugins.Backend: EBS volumes are future work.
func (b *Backend) CreateVolume(context.Context, api.VolumeSpec) (plugins.Volume, error) {
	return plugins.Volume{}, plugins.ErrUnsupported
}

// DeleteVolume implements plugins.Backend.
func (b *Backend) DeleteVolume(context.Context, string) error { return plugins.ErrUnsupported }
