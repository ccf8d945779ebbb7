// Package ec2fake is a local EC2 endpoint for tests: an HTTP server that
// speaks the EC2 query API (form-encoded Action=...; XML answers) for
// exactly the calls the aws backend makes (DescribeRegions,
// DescribeImages, RunInstances, DescribeInstances, TerminateInstances,
// DescribeSpotPriceHistory: empty unless a test sets SpotPrice),
// records every call, and lets a test refuse capacity or interrupt a spot
// machine. It checks that requests carry its access key id, not the
// signature. It must not import the aws backend, daemon or store.
package ec2fake

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// AccessKeyID and Secret are the credentials the fake accepts.
const (
	AccessKeyID = "AKIAGPUDTESTKEY00001"
	Secret      = "gpud-test-secret"
	// AMI is the one image the fake has.
	AMI = "ami-0123456789abcdef0"
)

// Call is one request the fake answered.
type Call struct {
	Action string
	Region string
	Params url.Values
}

// Instance is a machine the fake made.
type Instance struct {
	ID, Type, Region, State, ReasonCode, ReasonMessage string
	UserData                                           string // decoded
	Spot                                               bool
	Tags                                               map[string]string
	ClientToken                                        string
	Launched                                           time.Time
}

// Server is the fake endpoint.
type Server struct {
	*httptest.Server
	mu         sync.Mutex
	calls      []Call
	instances  []*Instance
	noCapacity map[string]bool
	regions    []string
	spot       map[string]string // region/type: price
	// lose is how many RunInstances answers to lose after making the
	// machine (a 503 in place of the answer).
	lose int
}

// LoseRunAnswers makes the next n RunInstances calls make (or find, by
// ClientToken) their machine and answer 503 instead of it, as when an
// answer is lost after EC2 acted.
func (s *Server) LoseRunAnswers(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lose = n
}

// Start starts a fake with regions enabled; Close stops it.
func Start(regions ...string) *Server {
	s := &Server{noCapacity: map[string]bool{}, regions: regions, spot: map[string]string{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// NoCapacity makes RunInstances of instance type typ answer
// InsufficientInstanceCapacity (or succeed again with on false).
func (s *Server) NoCapacity(typ string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noCapacity[typ] = on
}

// SpotPrice makes DescribeSpotPriceHistory in region list typ at price
// (USD per hour, as EC2 writes it: "0.3012"), the latest answer of zone
// a after an older, dearer one.
func (s *Server) SpotPrice(region, typ, price string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spot[region+"/"+typ] = price
}

// Interrupt terminates instance id as EC2 takes back a spot machine.
func (s *Server) Interrupt(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, i := range s.instances {
		if i.ID == id {
			i.State, i.ReasonCode, i.ReasonMessage = "terminated", "Server.SpotInstanceTermination", "Server.SpotInstanceTermination: Spot instance termination"
			return true
		}
	}
	return false
}

// Calls returns the calls so far, oldest first.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// CallsOf returns the calls of one action.
func (s *Server) CallsOf(action string) []Call {
	var out []Call
	for _, c := range s.Calls() {
		if c.Action == action {
			out = append(out, c)
		}
	}
	return out
}

// Instances returns copies of the machines made so far.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Instance, 0, len(s.instances))
	for _, i := range s.instances {
		out = append(out, *i)
	}
	return out
}

var credRE = regexp.MustCompile(`Credential=([^/]+)/\d+/([^/]+)/ec2/`)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		s.fail(w, 400, "MalformedQueryString", err.Error())
		return
	}
	m := credRE.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil || m[1] != AccessKeyID {
		s.fail(w, 401, "AuthFailure", "AWS was not able to validate the provided access credentials")
		return
	}
	region, action := m[2], r.PostForm.Get("Action")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, Call{Action: action, Region: region, Params: r.PostForm})
	switch action {
	case "DescribeRegions":
		var b strings.Builder
		for _, name := range s.regions {
			if want := list(r.PostForm, "RegionName"); len(want) > 0 && !slices.Contains(want, name) {
				continue
			}
			fmt.Fprintf(&b, "<item><regionName>%s</regionName><regionEndpoint>ec2.%s.amazonaws.com</regionEndpoint><optInStatus>opt-in-not-required</optInStatus></item>", name, name)
		}
		s.ok(w, action, "<regionInfo>"+b.String()+"</regionInfo>")
	case "DescribeImages":
		ids := list(r.PostForm, "ImageId")
		body := "<imagesSet></imagesSet>"
		if len(ids) == 0 || slices.Contains(ids, AMI) {
			body = "<imagesSet><item><imageId>" + AMI + "</imageId><name>gpud-test-image</name><creationDate>2025-06-01T00:00:00.000Z</creationDate><imageState>available</imageState></item></imagesSet>"
		}
		s.ok(w, action, body)
	case "RunInstances":
		s.runInstances(w, r.PostForm, region)
	case "DescribeSpotPriceHistory":
		var b strings.Builder
		now := time.Now().UTC()
		for _, typ := range list(r.PostForm, "InstanceType") {
			if p, ok := s.spot[region+"/"+typ]; ok {
				// Zone a's older answer is dearer: only the latest counts.
				fmt.Fprintf(&b, "<item><instanceType>%s</instanceType><productDescription>Linux/UNIX</productDescription><spotPrice>%s</spotPrice><timestamp>%s</timestamp><availabilityZone>%sa</availabilityZone></item>",
					typ, "99.0", now.Add(-time.Hour).Format(time.RFC3339), region)
				fmt.Fprintf(&b, "<item><instanceType>%s</instanceType><productDescription>Linux/UNIX</productDescription><spotPrice>%s</spotPrice><timestamp>%s</timestamp><availabilityZone>%sa</availabilityZone></item>",
					typ, esc(p), now.Format(time.RFC3339), region)
			}
		}
		s.ok(w, action, "<spotPriceHistorySet>"+b.String()+"</spotPriceHistorySet><nextToken></nextToken>")
	case "DescribeInstances":
		s.describeInstances(w, r.PostForm, region)
	case "TerminateInstances":
		var b strings.Builder
		for _, id := range list(r.PostForm, "InstanceId") {
			i := s.find(id)
			if i == nil {
				s.fail(w, 400, "InvalidInstanceID.NotFound", "The instance ID '"+id+"' does not exist")
				return
			}
			prev := i.State
			if i.State != "terminated" {
				i.State, i.ReasonCode, i.ReasonMessage = "terminated", "Client.UserInitiatedShutdown", "Client.UserInitiatedShutdown: User initiated shutdown"
			}
			fmt.Fprintf(&b, "<item><instanceId>%s</instanceId><currentState><code>48</code><name>terminated</name></currentState><previousState><code>16</code><name>%s</name></previousState></item>", id, prev)
		}
		s.ok(w, action, "<instancesSet>"+b.String()+"</instancesSet>")
	default:
		s.fail(w, 400, "InvalidAction", "The action "+action+" is not valid for this web service")
	}
}

func (s *Server) find(id string) *Instance {
	for _, i := range s.instances {
		if i.ID == id {
			return i
		}
	}
	return nil
}

func (s *Server) runInstances(w http.ResponseWriter, p url.Values, region string) {
	typ := p.Get("InstanceType")
	if p.Get("ImageId") != AMI {
		s.fail(w, 400, "InvalidAMIID.NotFound", "The image id '["+p.Get("ImageId")+"]' does not exist")
		return
	}
	if s.noCapacity[typ] {
		s.fail(w, 500, "InsufficientInstanceCapacity", "We currently do not have sufficient "+typ+" capacity in the Availability Zone you requested")
		return
	}
	token := p.Get("ClientToken")
	var inst *Instance
	for _, i := range s.instances {
		if token != "" && i.ClientToken == token {
			inst = i
		}
	}
	if inst == nil {
		ud, err := base64.StdEncoding.DecodeString(p.Get("UserData"))
		if err != nil {
			s.fail(w, 400, "InvalidParameterValue", "Invalid BASE64 encoding of user data")
			return
		}
		inst = &Instance{ID: fmt.Sprintf("i-%017x", len(s.instances)+1), Type: typ, Region: region, State: "pending", UserData: string(ud),
			Spot: p.Get("InstanceMarketOptions.MarketType") == "spot", Tags: map[string]string{}, ClientToken: token, Launched: time.Now()}
		for n := 1; p.Has(fmt.Sprintf("TagSpecification.1.Tag.%d.Key", n)); n++ {
			inst.Tags[p.Get(fmt.Sprintf("TagSpecification.1.Tag.%d.Key", n))] = p.Get(fmt.Sprintf("TagSpecification.1.Tag.%d.Value", n))
		}
		s.instances = append(s.instances, inst)
	} else if inst.State == "pending" {
		inst.State = "running"
	}
	if s.lose > 0 {
		s.lose--
		s.fail(w, 503, "Unavailable", "The service is unavailable. Please try again shortly.")
		return
	}
	s.ok(w, "RunInstances", "<reservationId>r-1</reservationId><ownerId>123456789012</ownerId><groupSet/><instancesSet>"+instanceXML(inst)+"</instancesSet>")
}

func (s *Server) describeInstances(w http.ResponseWriter, p url.Values, region string) {
	ids := list(p, "InstanceId")
	filters := map[string][]string{}
	for n := 1; p.Has(fmt.Sprintf("Filter.%d.Name", n)); n++ {
		filters[p.Get(fmt.Sprintf("Filter.%d.Name", n))] = list(p, fmt.Sprintf("Filter.%d.Value", n))
	}
	var b strings.Builder
	for _, i := range s.instances {
		if i.Region != region || len(ids) > 0 && !slices.Contains(ids, i.ID) || !matches(i, filters) {
			continue
		}
		if i.State == "pending" {
			i.State = "running" // boots by the next look
		}
		b.WriteString("<item><reservationId>r-1</reservationId><ownerId>123456789012</ownerId><instancesSet>" + instanceXML(i) + "</instancesSet></item>")
	}
	s.ok(w, "DescribeInstances", "<reservationSet>"+b.String()+"</reservationSet>")
}

func matches(i *Instance, filters map[string][]string) bool {
	for name, values := range filters {
		var have string
		switch {
		case strings.HasPrefix(name, "tag:"):
			v, ok := i.Tags[strings.TrimPrefix(name, "tag:")]
			if !ok {
				return false
			}
			have = v
		case name == "instance-id":
			have = i.ID
		case name == "instance-state-name":
			have = i.State
		default:
			continue
		}
		if !slices.Contains(values, have) {
			return false
		}
	}
	return true
}

func instanceXML(i *Instance) string {
	codes := map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}
	var tags strings.Builder
	for k, v := range i.Tags {
		fmt.Fprintf(&tags, "<item><key>%s</key><value>%s</value></item>", esc(k), esc(v))
	}
	life := ""
	if i.Spot {
		life = "<instanceLifecycle>spot</instanceLifecycle>"
	}
	reason := ""
	if i.ReasonCode != "" {
		reason = "<stateReason><code>" + esc(i.ReasonCode) + "</code><message>" + esc(i.ReasonMessage) + "</message></stateReason>"
	}
	n := strings.TrimPrefix(i.ID, "i-")
	return fmt.Sprintf("<item><instanceId>%s</instanceId><imageId>%s</imageId><instanceState><code>%d</code><name>%s</name></instanceState>"+
		"<privateDnsName>ip-10-0-0-%s.ec2.internal</privateDnsName><privateIpAddress>10.0.0.%s</privateIpAddress><instanceType>%s</instanceType>"+
		"<launchTime>%s</launchTime><placement><availabilityZone>%sa</availabilityZone></placement>%s%s<tagSet>%s</tagSet></item>",
		i.ID, AMI, codes[i.State], i.State, n[len(n)-2:], strconv.Itoa(len(n)), i.Type, i.Launched.UTC().Format(time.RFC3339), i.Region, life, reason, tags.String())
}

func esc(s string) string {
	var b strings.Builder
	if err := xml.EscapeText(&b, []byte(s)); err != nil {
		return ""
	}
	return b.String()
}

// list reads a query list parameter: Name.1, Name.2, ...
func list(p url.Values, name string) []string {
	var out []string
	for n := 1; p.Has(name + "." + strconv.Itoa(n)); n++ {
		out = append(out, p.Get(name+"."+strconv.Itoa(n)))
	}
	return out
}

func (s *Server) ok(w http.ResponseWriter, action, body string) {
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<%sResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>req-%d</requestId>%s</%sResponse>`,
		action, len(s.calls), body, action)
}

func (s *Server) fail(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>req-err</RequestID></Response>`, code, esc(msg))
}
