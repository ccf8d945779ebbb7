// Package aws is the AWS EC2 backend (issue 18 scope 2): an instance
// backend (plugins.Info.Instances) that makes EC2 machines booting `gpud
// agent --server URL` with a per-machine registration token, so each joins
// its backend fleet as a registered host and gpud's agents run the jobs.
//
// It owns: the configuration (regions, static credentials, an optional
// endpoint for EC2-compatible clouds and tests, subnet, security groups,
// AMI or an AMI lookup rule, key name); the GPU price catalog shipped in
// the binary (catalog.csv, dated in catalog.go) and its refresh from the
// AWS pricing API and spot price history (pricing.go); the cloud-init
// user data (userdata.go); RunInstances (spot through InstanceMarketOptions),
// TerminateInstances and DescribeInstances, by the tags gpud:server,
// gpud:project, gpud:fleet and gpud:instance. Everything it makes is found
// again by those tags, so a restarted plugin loses nothing.
//
// It speaks to EC2 only through aws-sdk-go-v2's service/ec2 client (and
// service/pricing for prices) with static credentials: never the SDK's default chain (config), which would
// read the server's own environment, ~/.aws files and instance metadata.
// ec2fake is a local EC2 query-API endpoint for tests; this backend is the
// one that is not tested against the real service.
//
// It implements plugins.Backend and plugins.InstanceLister and must not
// import daemon, store or sched.
package aws
