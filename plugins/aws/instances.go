package aws

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"gpud.dev/gpud/plugins"
)

type ec2Region = types.Region

// The tags on every machine the backend makes: it finds them again by
// these, never by memory.
const (
	tagServer   = "gpud:server"
	tagProject  = "gpud:project"
	tagFleet    = "gpud:fleet"
	tagInstance = "gpud:instance"
)

// noCapacityCodes are EC2's answers that mean "not now, maybe elsewhere":
// the server tries the next offer, with backoff (plugins.NoCapacity).
var noCapacityCodes = []string{"InsufficientInstanceCapacity", "InsufficientCapacity", "InstanceLimitExceeded",
	"MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow", "InsufficientHostCapacity", "VcpuLimitExceeded", "Unsupported"}

// image resolves the AMI of region: the configured one, or the newest of
// ami_lookup's owners and name.
func (b *Backend) image(ctx context.Context, region string) (string, error) {
	if b.cfg.AMI != "" {
		out, err := b.clients[region].DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{b.cfg.AMI}})
		if err != nil {
			return "", b.callError("ami "+b.cfg.AMI+" (DescribeImages)", region, err)
		}
		if len(out.Images) == 0 {
			return "", fmt.Errorf("aws backend: ami: %s does not exist in %s (or the account may not use it)", b.cfg.AMI, region)
		}
		return b.cfg.AMI, nil
	}
	l := b.cfg.AMILookup
	out, err := b.clients[region].DescribeImages(ctx, &ec2.DescribeImagesInput{Owners: l.Owners,
		Filters: []types.Filter{{Name: aws.String("name"), Values: []string{l.Name}}, {Name: aws.String("state"), Values: []string{"available"}}}})
	if err != nil {
		return "", b.callError("ami_lookup (DescribeImages)", region, err)
	}
	if len(out.Images) == 0 {
		return "", fmt.Errorf("aws backend: ami_lookup: no image named %q of owners %s in %s", l.Name, strings.Join(l.Owners, ", "), region)
	}
	newest := slices.MaxFunc(out.Images, func(x, y types.Image) int {
		return strings.Compare(aws.ToString(x.CreationDate), aws.ToString(y.CreationDate))
	})
	return aws.ToString(newest.ImageId), nil
}

func (b *Backend) entry(typ string) (catalogEntry, bool) {
	i := slices.IndexFunc(b.catalog, func(e catalogEntry) bool { return e.Type == typ })
	if i < 0 {
		return catalogEntry{}, false
	}
	return b.catalog[i], true
}

// CreateInstance implements plugins.Backend: RunInstances of the offer's
// type in its region, booting user data that starts `gpud agent --server`
// with the request's registration settings. It is idempotent on req.ID: a
// machine already tagged with it is returned as it is (whatever its
// state), and EC2's ClientToken covers a call cut before its answer.
func (b *Backend) CreateInstance(ctx context.Context, req plugins.InstanceRequest) (plugins.Instance, error) {
	region, typ := req.Offer.Region, req.Offer.Instance
	cl, ok := b.clients[region]
	if !ok {
		return plugins.Instance{}, fmt.Errorf("aws backend: offer region %q is not one of the backend's regions (%s)", region, strings.Join(b.cfg.Regions, ", "))
	}
	e, ok := b.entry(typ)
	if !ok {
		return plugins.Instance{}, fmt.Errorf("aws backend: instance type %q is not in the price catalog", typ)
	}
	if req.ID == "" || req.Register.ServerURL == "" || req.Register.Token == "" {
		return plugins.Instance{}, errors.New("aws backend: create instance: the request needs an id, a server URL and a registration token")
	}
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if have, err := b.find(ctx, region, req.ID); err != nil || have != nil {
		if have != nil {
			return *have, nil
		}
		return plugins.Instance{}, err
	}
	ami, err := b.image(ctx, region)
	if err != nil {
		return plugins.Instance{}, err
	}
	if b.cfg.RegistrationURL != "" {
		req.Register.ServerURL = b.cfg.RegistrationURL
	}
	script, err := UserData(req.Register, req.ID, b.cfg.InstallCommand)
	if err != nil {
		return plugins.Instance{}, err
	}
	tags := []types.Tag{{Key: aws.String(tagServer), Value: aws.String(b.cfg.ServerID)}, {Key: aws.String(tagInstance), Value: aws.String(req.ID)},
		{Key: aws.String(tagFleet), Value: aws.String(req.Register.Fleet)}, {Key: aws.String("Name"), Value: aws.String("gpud-" + req.ID)}}
	if req.Project != "" {
		tags = append(tags, types.Tag{Key: aws.String(tagProject), Value: aws.String(req.Project)})
	}
	in := &ec2.RunInstancesInput{ImageId: aws.String(ami), InstanceType: types.InstanceType(typ), MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		UserData: aws.String(base64.StdEncoding.EncodeToString([]byte(script))), ClientToken: aws.String(clientToken(b.cfg.ServerID, req.ID)),
		InstanceInitiatedShutdownBehavior: types.ShutdownBehaviorTerminate,
		TagSpecifications:                 []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: tags}}}
	if b.cfg.SubnetID != "" {
		in.SubnetId = aws.String(b.cfg.SubnetID)
	}
	if len(b.cfg.SecurityGroupIDs) > 0 {
		in.SecurityGroupIds = b.cfg.SecurityGroupIDs
	}
	if b.cfg.KeyName != "" {
		in.KeyName = aws.String(b.cfg.KeyName)
	}
	if req.Reservation != "" {
		if !strings.HasPrefix(req.Reservation, "cr-") {
			return plugins.Instance{}, fmt.Errorf("aws backend: reservation %q is not a capacity reservation id like cr-0123456789abcdef0", req.Reservation)
		}
		in.CapacityReservationSpecification = &types.CapacityReservationSpecification{
			CapacityReservationTarget: &types.CapacityReservationTarget{CapacityReservationId: aws.String(req.Reservation)}}
	}
	spot := req.Spot || req.Offer.Spot
	if spot {
		in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot,
			SpotOptions: &types.SpotMarketOptions{SpotInstanceType: types.SpotInstanceTypeOneTime, InstanceInterruptionBehavior: types.InstanceInterruptionBehaviorTerminate}}
	}
	out, err := cl.RunInstances(ctx, in)
	if err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) && slices.Contains(noCapacityCodes, ae.ErrorCode()) {
			return plugins.Instance{}, fmt.Errorf("aws backend: %s %s in %s: %s (%s): %s", plugins.NoCapacity, typ, region, ae.ErrorCode(), ae.ErrorMessage(), market(spot))
		}
		return plugins.Instance{}, b.callError("RunInstances "+typ, region, err)
	}
	if len(out.Instances) == 0 {
		return plugins.Instance{}, fmt.Errorf("aws backend: RunInstances %s in %s answered no instance", typ, region)
	}
	inst := b.instance(region, out.Instances[0])
	inst.RequestID = req.ID
	if inst.Price == 0 {
		inst.Price = e.OnDemand
	}
	return inst, nil
}

func market(spot bool) string {
	if spot {
		return "spot"
	}
	return "on demand"
}

// clientToken is EC2's idempotency token for req (at most 64 characters).
func clientToken(server, id string) string {
	sum := sha256.Sum256([]byte(server + "/" + id))
	return "gpud-" + hex.EncodeToString(sum[:20])
}

// find returns the machine tagged with gpud instance id, if any.
func (b *Backend) find(ctx context.Context, region, id string) (*plugins.Instance, error) {
	got, err := b.describe(ctx, region, types.Filter{Name: aws.String("tag:" + tagInstance), Values: []string{id}})
	if err != nil || len(got) == 0 {
		return nil, err
	}
	// A terminated machine made for the id earlier stays the answer: the
	// id is used once, and its state tells the caller what became of it.
	return &got[0], nil
}

// describe lists this server's machines in region that match filter.
func (b *Backend) describe(ctx context.Context, region string, filter ...types.Filter) ([]plugins.Instance, error) {
	in := &ec2.DescribeInstancesInput{Filters: append([]types.Filter{{Name: aws.String("tag:" + tagServer), Values: []string{b.cfg.ServerID}}}, filter...)}
	var out []plugins.Instance
	p := ec2.NewDescribeInstancesPaginator(b.clients[region], in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, b.callError("DescribeInstances", region, err)
		}
		for _, r := range page.Reservations {
			for _, i := range r.Instances {
				out = append(out, b.instance(region, i))
			}
		}
	}
	return out, nil
}

// instance is EC2's machine as gpud reports it.
func (b *Backend) instance(region string, i types.Instance) plugins.Instance {
	out := plugins.Instance{ID: aws.ToString(i.InstanceId), Region: region, Type: string(i.InstanceType),
		Address: aws.ToString(i.PrivateIpAddress), Hostname: aws.ToString(i.PrivateDnsName), Spot: i.InstanceLifecycle == types.InstanceLifecycleTypeSpot}
	if i.State != nil {
		out.State = string(i.State.Name)
	}
	for _, t := range i.Tags {
		if aws.ToString(t.Key) == tagInstance {
			out.RequestID = aws.ToString(t.Value)
		}
	}
	if e, ok := b.entry(out.Type); ok {
		out.Price = b.price(region, e, out.Spot)
	}
	if r := i.StateReason; r != nil {
		code := aws.ToString(r.Code)
		out.Reason = strings.TrimSpace(code + ": " + aws.ToString(r.Message))
		// The service, not gpud nor a user, ended it: a spot interruption
		// (Server.SpotInstanceTermination) or a host failure.
		gone := out.State == string(types.InstanceStateNameShuttingDown) || out.State == string(types.InstanceStateNameTerminated) || out.State == string(types.InstanceStateNameStopped)
		out.Interrupted = gone && strings.HasPrefix(code, "Server.")
	}
	return out
}

// TerminateInstance implements plugins.Backend: id is the EC2 instance id
// or the gpud instance id it was made for; a machine already gone is
// no error.
func (b *Backend) TerminateInstance(ctx context.Context, id string) error {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	for _, region := range b.cfg.Regions {
		filter := types.Filter{Name: aws.String("tag:" + tagInstance), Values: []string{id}}
		if strings.HasPrefix(id, "i-") {
			filter = types.Filter{Name: aws.String("instance-id"), Values: []string{id}}
		}
		got, err := b.describe(ctx, region, filter)
		if err != nil {
			return err
		}
		var ids []string
		for _, i := range got {
			if i.State != string(types.InstanceStateNameTerminated) {
				ids = append(ids, i.ID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		if _, err := b.clients[region].TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids}); err != nil {
			var ae smithy.APIError
			if errors.As(err, &ae) && ae.ErrorCode() == "InvalidInstanceID.NotFound" {
				continue
			}
			return b.callError("TerminateInstances", region, err)
		}
	}
	return nil
}

// Instances implements plugins.InstanceLister: this server's machines in
// every region, terminated ones included while EC2 still lists them
// (about an hour), so a spot interruption is seen.
func (b *Backend) Instances(ctx context.Context) ([]plugins.Instance, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	var out []plugins.Instance
	for _, region := range b.cfg.Regions {
		got, err := b.describe(ctx, region)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}
