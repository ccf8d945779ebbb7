package aws

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Config is an AWS backend's configuration (a project's `backends: [{type:
// aws, ...}]` entry). The server stores it sealed, like every backend's.
type Config struct {
	// Regions the backend offers and makes machines in (us-east-1, ...);
	// at least one.
	Regions []string `json:"regions"`
	// AccessKeyID and SecretAccessKey (and SessionToken for temporary
	// credentials) are an IAM user's or role's static credentials. They
	// need ec2:DescribeRegions, DescribeInstances, DescribeImages (with
	// ami_lookup), RunInstances, CreateTags and TerminateInstances; and,
	// optionally, pricing:GetProducts and ec2:DescribeSpotPriceHistory to
	// refresh the catalog's prices.
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
	SessionToken    string `json:"session_token,omitempty"`
	// EndpointURL replaces EC2's regional endpoints (an EC2-compatible
	// cloud, or the tests' local endpoint).
	EndpointURL string `json:"endpoint_url,omitempty"`
	// PricingEndpointURL replaces the AWS Price List Query API's endpoint
	// (api.pricing.us-east-1.amazonaws.com; the tests' local one). With
	// endpoint_url set and this empty, prices are not refreshed from AWS
	// (its list prices are not an EC2-compatible cloud's).
	PricingEndpointURL string `json:"pricing_endpoint_url,omitempty"`
	// SubnetID and SecurityGroupIDs place the machines; empty: the
	// region's default VPC and security group. Both are regional, so
	// they need exactly one region.
	SubnetID         string   `json:"subnet_id,omitempty"`
	SecurityGroupIDs []string `json:"security_group_ids,omitempty"`
	// AMI is the image the machines boot (one region), with gpud and the
	// NVIDIA driver on it or installed by InstallCommand; AMILookup finds
	// the newest image by owner and name pattern in each region instead.
	AMI       string     `json:"ami,omitempty"`
	AMILookup *AMILookup `json:"ami_lookup,omitempty"`
	// KeyName is an EC2 key pair for SSH to the machines (optional: gpud
	// reaches them through their agents' tunnels).
	KeyName string `json:"key_name,omitempty"`
	// InstallCommand is a shell command the user data runs when gpud is
	// not on the image's PATH (it must leave gpud on the PATH).
	InstallCommand string `json:"install_command,omitempty"`
	// RegistrationURL is the server's registration address as the
	// machines reach it (https://gpud.example.com:7443); default the
	// address the server listens on (gpud serve --registration-listen),
	// which is right only where the machines reach that address.
	RegistrationURL string `json:"registration_url,omitempty"`
	// ServerID tells this server's machines from another gpud's in the
	// same account (tag gpud:server); default "gpud".
	ServerID string `json:"server_id,omitempty"`
	// TimeoutSeconds bounds each EC2 call; default 30.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// DenyServerNetwork refuses connections to the server host's own,
	// loopback and link-local addresses (set by the server on a project
	// admin's backend, against DNS rebinding of endpoint_url).
	DenyServerNetwork bool `json:"deny_server_network,omitempty"`
}

// AMILookup selects the newest image (by creation date) of Owners whose
// name matches Name (EC2's name filter: * and ? wildcards).
type AMILookup struct {
	Owners []string `json:"owners"`
	Name   string   `json:"name"`
}

var (
	regionRE = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-\d+$`)
	amiRE    = regexp.MustCompile(`^ami-[0-9a-f]{8,17}$`)
)

func (c Config) withDefaults() Config {
	if c.ServerID == "" {
		c.ServerID = "gpud"
	}
	if c.TimeoutSeconds <= 0 {
		c.TimeoutSeconds = 30
	}
	return c
}

// validate refuses what the backend cannot honour, naming the field.
func (c Config) validate() error {
	if len(c.Regions) == 0 {
		return errors.New("aws backend: regions: at least one region, like [us-east-1]")
	}
	for i, r := range c.Regions {
		if !regionRE.MatchString(r) {
			return fmt.Errorf("aws backend: regions[%d]: %q is not a region name like us-east-1", i, r)
		}
	}
	if c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return errors.New("aws backend: access_key_id and secret_access_key are required (an IAM user's or role's static credentials); the server's own AWS identity is never used")
	}
	if c.EndpointURL != "" {
		u, err := url.Parse(c.EndpointURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("aws backend: endpoint_url %q: an http(s) URL", c.EndpointURL)
		}
	}
	if c.PricingEndpointURL != "" {
		u, err := url.Parse(c.PricingEndpointURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("aws backend: pricing_endpoint_url %q: an http(s) URL", c.PricingEndpointURL)
		}
	}
	if c.RegistrationURL != "" {
		u, err := url.Parse(c.RegistrationURL)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("aws backend: registration_url %q: an https:// URL (the agents' tunnel is TLS)", c.RegistrationURL)
		}
	}
	if len(c.Regions) > 1 && (c.SubnetID != "" || len(c.SecurityGroupIDs) > 0 || c.AMI != "") {
		return fmt.Errorf("aws backend: subnet_id, security_group_ids and ami are regional, and regions lists %d: use one region per backend (add one backend per region), or ami_lookup and the regions' default VPCs", len(c.Regions))
	}
	switch {
	case c.AMI != "" && c.AMILookup != nil:
		return errors.New("aws backend: set ami or ami_lookup, not both")
	case c.AMI == "" && c.AMILookup == nil:
		return errors.New("aws backend: no image: set ami (an image with gpud and the NVIDIA driver) or ami_lookup {owners, name}")
	case c.AMI != "" && !amiRE.MatchString(c.AMI):
		return fmt.Errorf("aws backend: ami %q is not an image id like ami-0123456789abcdef0", c.AMI)
	case c.AMILookup != nil && (len(c.AMILookup.Owners) == 0 || strings.TrimSpace(c.AMILookup.Name) == ""):
		return errors.New("aws backend: ami_lookup needs owners (account ids or amazon) and name (a pattern like Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *)")
	}
	if c.SubnetID != "" && !strings.HasPrefix(c.SubnetID, "subnet-") {
		return fmt.Errorf("aws backend: subnet_id %q is not a subnet id like subnet-0123abcd", c.SubnetID)
	}
	for i, g := range c.SecurityGroupIDs {
		if !strings.HasPrefix(g, "sg-") {
			return fmt.Errorf("aws backend: security_group_ids[%d]: %q is not a security group id like sg-0123abcd", i, g)
		}
	}
	if strings.ContainsAny(c.ServerID, " ,=") || len(c.ServerID) > 64 {
		return fmt.Errorf("aws backend: server_id %q: up to 64 characters without spaces, commas or =", c.ServerID)
	}
	return nil
}
