package lagread

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka's group types, as ListGroups v5 names them (KIP-848). Every type is described with its own RPC:
//
//	type      created by                                       described with               committed position
//	classic   JoinGroup/SyncGroup clients, or commits only    DescribeGroups               OffsetFetch
//	consumer  group.protocol=consumer clients (KIP-848)       ConsumerGroupDescribe (69)   OffsetFetch
//	share     share consumers (KIP-932)                        ShareGroupDescribe (77)      DescribeShareGroupOffsets (90): the SPSO
//	streams   group.protocol=streams applications (KIP-1071)  StreamsGroupDescribe (89)    OffsetFetch
//
// DescribeGroups answers only classic groups. For the three new types Kafka 4.4 answers v6 (KIP-1043) with
// GROUP_ID_NOT_FOUND (error 69, "... is not a classic group") and v0-v5 (sarama's range) with a Dead group without
// error, protocol or members (TestGroupType*, checkDescribeGroupsAnswer): tools that only use it drop these groups or
// show a live KIP-848 group as Dead with no members.
const (
	GroupTypeClassic  = "classic"
	GroupTypeConsumer = "consumer"
	GroupTypeShare    = "share"
	GroupTypeStreams  = "streams"
)

// listedGroupTypes is the ListGroups v5 types filter: the types this reader can describe. A group of a type Kafka adds
// later is not listed rather than mis-described as a classic group.
var listedGroupTypes = []string{GroupTypeClassic, GroupTypeConsumer, GroupTypeShare, GroupTypeStreams}

// Kafka API keys of the group RPCs whose support is checked per broker.
const (
	apiDescribeGroups            int16 = 15
	apiConsumerGroupDescribe     int16 = 69
	apiShareGroupDescribe        int16 = 77
	apiStreamsGroupDescribe      int16 = 89
	apiDescribeShareGroupOffsets int16 = 90
)

var apiNames = map[int16]string{
	apiDescribeGroups:            "DescribeGroups",
	apiConsumerGroupDescribe:     "ConsumerGroupDescribe",
	apiShareGroupDescribe:        "ShareGroupDescribe",
	apiStreamsGroupDescribe:      "StreamsGroupDescribe",
	apiDescribeShareGroupOffsets: "DescribeShareGroupOffsets",
}

// groupDesc is one group as its coordinator lists and describes it, whatever its type.
type groupDesc struct {
	name         string
	groupType    string // one of the GroupType constants ("classic" for brokers before ListGroups v5)
	protocolType string // "consumer", "share", "streams", "" (commits only), ...
	state        string
	// epoch and assignmentEpoch are the group epoch and the epoch of its target assignment (KIP-848, share and
	// streams groups); 0 for classic groups.
	epoch, assignmentEpoch int32
	members                []memberDesc
	// topology is a streams group's topology: which subtopology reads which topic (nil for other types, and for a
	// streams group whose topology is not initialized yet).
	topology *streamsTopology
	// err is set when the group could not be described this cycle (its listing is still known); errCode is the Kafka
	// error code of the coordinator's answer for this group (0 when the whole request failed).
	err     string
	errCode int16
}

// memberDesc is one member and its partitions: assigned (owned now) and target (the coordinator's target assignment,
// reached after revocations; KIP-848 and streams groups only). A streams member's partitions are those of its active
// tasks: active task (subtopology s, partition p) reads partition p of every source topic of s.
type memberDesc struct {
	id, clientID, host string
	epoch              int32
	assigned, target   map[string][]int32
}

// StreamsTopicRole says how a streams group uses a topic it reads (KIP-1071 topology).
type StreamsTopicRole struct {
	Subtopology string // the subtopology that reads the topic
	// Internal is true for a repartition topic (created and written by the application itself); false for a
	// user source topic.
	Internal bool
}

// streamsTopology is what a streams group's coordinator knows of its topology.
type streamsTopology struct {
	epoch int32
	// reads maps every topic the group consumes (source and repartition-source topics) to its role.
	reads map[string]StreamsTopicRole
	// changelogs are the state-store changelog topics (written, and read only to restore state: no commits).
	changelogs []string
	// sources maps each subtopology to the topics it reads, for decoding task assignments.
	sources map[string][]string
}

// listGroupsRequest is the ListGroups request of every cycle: v5 with the types filter (sarama lowers the version to
// the broker's maximum; before v5 every group is classic and the filter is not sent).
func listGroupsRequest() *sarama.ListGroupsRequest {
	return &sarama.ListGroupsRequest{Version: 5, TypesFilter: listedGroupTypes}
}

// listedGroups turns a ListGroups answer into one groupDesc per group Tidemark measures, sorted by name: classic groups
// of the consumer protocol or with commits only (not Connect or other protocols), and every KIP-848, share and
// streams group.
func listedGroups(lr *sarama.ListGroupsResponse) []groupDesc {
	out := make([]groupDesc, 0, len(lr.Groups))
	for name, proto := range lr.Groups {
		d := lr.GroupsData[name]
		typ := strings.ToLower(d.GroupType)
		if typ == "" {
			typ = GroupTypeClassic
		}
		switch typ {
		case GroupTypeClassic:
			if proto != "consumer" && proto != "" {
				continue
			}
		case GroupTypeConsumer, GroupTypeShare, GroupTypeStreams:
		default:
			continue // a type this reader cannot describe
		}
		out = append(out, groupDesc{name: name, groupType: typ, protocolType: proto, state: d.GroupState})
	}
	slices.SortFunc(out, func(a, b groupDesc) int { return strings.Compare(a.name, b.name) })
	return out
}

// namesOfType returns the names of the groups of type typ.
func namesOfType(gs []groupDesc, typ string) []string {
	var names []string
	for _, g := range gs {
		if g.groupType == typ {
			names = append(names, g.name)
		}
	}
	return names
}

// applyClassic merges a DescribeGroups answer into gs.
func applyClassic(gs []groupDesc, dr *sarama.DescribeGroupsResponse) {
	byName := map[string]*sarama.GroupDescription{}
	for _, gd := range dr.Groups {
		byName[gd.GroupId] = gd
	}
	for i := range gs {
		g := &gs[i]
		gd := byName[g.name]
		if g.groupType != GroupTypeClassic || gd == nil {
			continue
		}
		if !errors.Is(gd.Err, sarama.ErrNoError) {
			g.err, g.errCode = fmt.Sprintf("describe group: %v", gd.Err), int16(gd.Err)
			continue
		}
		g.state, g.protocolType = gd.State, gd.ProtocolType
		g.members = decodeClassicMembers(gd)
	}
}

// decodeClassicMembers turns DescribeGroups members into memberDescs, decoding the consumer protocol assignment. A
// member whose assignment does not decode (another protocol) is kept without one.
func decodeClassicMembers(gd *sarama.GroupDescription) []memberDesc {
	if len(gd.Members) == 0 {
		return nil
	}
	out := make([]memberDesc, 0, len(gd.Members))
	for id, m := range gd.Members {
		mem := memberDesc{id: id, clientID: m.ClientId, host: m.ClientHost}
		if gd.ProtocolType == "consumer" && len(m.MemberAssignment) > 0 {
			if a, err := m.GetMemberAssignment(); err == nil && len(a.Topics) > 0 {
				mem.assigned = a.Topics
			}
		}
		out = append(out, mem)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// applyConsumer merges a ConsumerGroupDescribe answer (KIP-848) into gs.
func applyConsumer(gs []groupDesc, resp *sarama.ConsumerGroupDescribeResponse) {
	byName := map[string]*sarama.ConsumerGroupDescription{}
	for i := range resp.Groups {
		byName[resp.Groups[i].GroupID] = &resp.Groups[i]
	}
	for i := range gs {
		g := &gs[i]
		gd := byName[g.name]
		if g.groupType != GroupTypeConsumer || gd == nil {
			continue
		}
		if !errors.Is(gd.ErrorCode, sarama.ErrNoError) {
			g.err, g.errCode = "describe consumer group: "+kafkaErrText(gd.ErrorCode.Error(), gd.ErrorMessage), int16(gd.ErrorCode)
			continue
		}
		g.state, g.epoch, g.assignmentEpoch = gd.GroupState, gd.GroupEpoch, gd.AssignmentEpoch
		g.members = make([]memberDesc, 0, len(gd.Members))
		for _, m := range gd.Members {
			g.members = append(g.members, memberDesc{id: m.MemberID, clientID: m.ClientID, host: m.ClientHost,
				epoch: m.MemberEpoch, assigned: consumerAssignment(m.Assignment), target: consumerAssignment(m.TargetAssignment)})
		}
		sort.Slice(g.members, func(i, j int) bool { return g.members[i].id < g.members[j].id })
	}
}

func consumerAssignment(a sarama.ConsumerGroupAssignment) map[string][]int32 {
	if len(a.TopicPartitions) == 0 {
		return nil
	}
	out := make(map[string][]int32, len(a.TopicPartitions))
	for _, tp := range a.TopicPartitions {
		if tp.TopicName == "" || len(tp.Partitions) == 0 {
			continue
		}
		out[tp.TopicName] = sortedPartitions(append(out[tp.TopicName], tp.Partitions...))
	}
	return out
}

// applyShare merges a ShareGroupDescribe answer (KIP-932) into gs.
func applyShare(gs []groupDesc, resp *kmsg.ShareGroupDescribeResponse) {
	byName := map[string]*kmsg.ShareGroupDescribeResponseGroup{}
	for i := range resp.Groups {
		byName[resp.Groups[i].GroupID] = &resp.Groups[i]
	}
	for i := range gs {
		g := &gs[i]
		gd := byName[g.name]
		if g.groupType != GroupTypeShare || gd == nil {
			continue
		}
		if err := kerr.ErrorForCode(gd.ErrorCode); err != nil {
			g.err, g.errCode = "describe share group: "+kafkaErrText(err.Error(), gd.ErrorMessage), gd.ErrorCode
			continue
		}
		g.state, g.epoch, g.assignmentEpoch = gd.GroupState, gd.GroupEpoch, gd.AssignmentEpoch
		g.members = make([]memberDesc, 0, len(gd.Members))
		for _, m := range gd.Members {
			md := memberDesc{id: m.MemberID, clientID: m.ClientID, host: m.ClientHost, epoch: m.MemberEpoch}
			for _, tp := range m.Assignment.TopicPartitions {
				if tp.Topic == "" || len(tp.Partitions) == 0 {
					continue
				}
				if md.assigned == nil {
					md.assigned = map[string][]int32{}
				}
				md.assigned[tp.Topic] = sortedPartitions(append(md.assigned[tp.Topic], tp.Partitions...))
			}
			g.members = append(g.members, md)
		}
		sort.Slice(g.members, func(i, j int) bool { return g.members[i].id < g.members[j].id })
	}
}

// applyStreams merges a StreamsGroupDescribe answer (KIP-1071) into gs: state, epochs, topology and members with the
// topic-partitions of their active tasks.
func applyStreams(gs []groupDesc, resp *kmsg.StreamsGroupDescribeResponse) {
	byName := map[string]*kmsg.StreamsGroupDescribeResponseGroup{}
	for i := range resp.Groups {
		byName[resp.Groups[i].Group] = &resp.Groups[i]
	}
	for i := range gs {
		g := &gs[i]
		gd := byName[g.name]
		if g.groupType != GroupTypeStreams || gd == nil {
			continue
		}
		if err := kerr.ErrorForCode(gd.ErrorCode); err != nil {
			g.err, g.errCode = "describe streams group: "+kafkaErrText(err.Error(), gd.ErrorMessage), gd.ErrorCode
			continue
		}
		g.state, g.epoch, g.assignmentEpoch = gd.State, gd.Epoch, gd.AssignmentEpoch
		g.topology = decodeTopology(gd.Topology)
		g.members = make([]memberDesc, 0, len(gd.Members))
		for _, m := range gd.Members {
			g.members = append(g.members, memberDesc{id: m.MemberID, clientID: m.ClientID, host: m.ClientHost,
				epoch: m.MemberEpoch, assigned: g.topology.taskPartitions(m.Assignment.ActiveTasks),
				target: g.topology.taskPartitions(m.TargetAssignment.ActiveTasks)})
		}
		sort.Slice(g.members, func(i, j int) bool { return g.members[i].id < g.members[j].id })
	}
}

// decodeTopology reads a streams group's topology: every topic a subtopology reads is a source (a user topic) or a
// repartition-source (an internal topic the application writes itself); changelog topics are only written.
func decodeTopology(t *kmsg.StreamsGroupDescribeResponseGroupTopology) *streamsTopology {
	if t == nil {
		return nil
	}
	st := &streamsTopology{epoch: t.Epoch, reads: map[string]StreamsTopicRole{}, sources: map[string][]string{}}
	for _, s := range t.Subtopologies {
		for _, topic := range s.SourceTopics {
			st.reads[topic] = StreamsTopicRole{Subtopology: s.SubtopologyID}
			st.sources[s.SubtopologyID] = append(st.sources[s.SubtopologyID], topic)
		}
		for _, ti := range s.RepartitionSourceTopics {
			st.reads[ti.Topic] = StreamsTopicRole{Subtopology: s.SubtopologyID, Internal: true}
			st.sources[s.SubtopologyID] = append(st.sources[s.SubtopologyID], ti.Topic)
		}
		for _, ti := range s.StateChangelogTopics {
			st.changelogs = append(st.changelogs, ti.Topic)
		}
	}
	for id := range st.sources {
		slices.Sort(st.sources[id])
		st.sources[id] = slices.Compact(st.sources[id])
	}
	slices.Sort(st.changelogs)
	st.changelogs = slices.Compact(st.changelogs)
	return st
}

// taskPartitions maps active tasks onto topic-partitions: task (s, p) reads partition p of each topic subtopology s
// reads. Without a topology the tasks cannot be mapped (nil).
func (st *streamsTopology) taskPartitions(tasks []kmsg.TaskIDs) map[string][]int32 {
	if st == nil || len(tasks) == 0 {
		return nil
	}
	out := map[string][]int32{}
	for _, task := range tasks {
		for _, topic := range st.sources[task.SubtopologyID] {
			out[topic] = append(out[topic], task.Partitions...)
		}
	}
	for topic, ps := range out {
		out[topic] = sortedPartitions(ps)
	}
	return out
}

func sortedPartitions(ps []int32) []int32 {
	slices.Sort(ps)
	return slices.Compact(ps)
}

// kafkaErrText is a Kafka error with the broker's own message when it sent one.
func kafkaErrText(code string, msg *string) string {
	if msg != nil && *msg != "" {
		return code + ": " + *msg
	}
	return code
}

// errUnsupported marks a read the broker cannot answer (an RPC or version it does not have).
var errUnsupported = errors.New("unsupported by the broker")

// supports reports whether broker id accepts API key at a version this reader speaks (ApiVersions, asked once per
// connection and cached). The error is errUnsupported (wrapped, naming the RPC and the broker's range) when it does
// not, or the ApiVersions failure.
func (c *ClusterReader) supports(ctx context.Context, id int32, key int16) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	vs, ok := c.versions[id]
	c.mu.Unlock()
	if !ok {
		b, err := c.broker(id)
		if err != nil {
			return err
		}
		c.requests.Add(1)
		resp, err := b.ApiVersions(&sarama.ApiVersionsRequest{Version: 3, ClientSoftwareName: "tidemark", ClientSoftwareVersion: "1"})
		if err == nil && resp.ErrorCode != 0 {
			err = sarama.KError(resp.ErrorCode)
		}
		if err != nil {
			return fmt.Errorf("api versions of %s: %w", brokerSubject(id), err)
		}
		vs = make(map[int16][2]int16, len(resp.ApiKeys))
		for _, k := range resp.ApiKeys {
			vs[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
		}
		c.mu.Lock()
		c.versions[id] = vs
		c.mu.Unlock()
	}
	r, ok := vs[key]
	lo, hi := clientVersions(key)
	switch {
	case !ok:
		return fmt.Errorf("%s: %s does not have this RPC: %w", apiNames[key], brokerSubject(id), errUnsupported)
	case r[1] < lo || r[0] > hi:
		return fmt.Errorf("%s: %s speaks v%d-v%d, Tidemark v%d-v%d: %w", apiNames[key], brokerSubject(id), r[0], r[1], lo, hi, errUnsupported)
	}
	return nil
}

// clientVersions is the version range this reader can send of key.
func clientVersions(key int16) (lo, hi int16) {
	switch key {
	case apiConsumerGroupDescribe:
		return 0, 1 // sarama v1.61
	case apiShareGroupDescribe:
		return 1, (&kmsg.ShareGroupDescribeRequest{}).MaxVersion() // v0 was Kafka 4.0's early access, removed in 4.1
	case apiStreamsGroupDescribe:
		return 0, (&kmsg.StreamsGroupDescribeRequest{}).MaxVersion()
	case apiDescribeShareGroupOffsets:
		return 0, (&kmsg.DescribeShareGroupOffsetsRequest{}).MaxVersion()
	}
	return 0, 0
}

// noteUnsupported records an unsupported read once per (RPC, broker) and logs it the first time.
func (c *ClusterReader) noteUnsupported(key int16, id int32, err error) {
	k := unsupportedKey{apiNames[key], id}
	c.mu.Lock()
	_, seen := c.unsupported[k]
	c.unsupported[k] = err.Error()
	c.mu.Unlock()
	if !seen && c.Logger != nil {
		c.Logger.Warn("kafka broker cannot answer a group read; those groups are listed without it", "rpc", k.rpc,
			"broker", id, "error", err)
	}
}

type unsupportedKey struct {
	rpc    string
	broker int32
}

// Unsupported returns the RPC names some broker could not answer since the reader was created (sorted, each once).
func (c *ClusterReader) Unsupported() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k := range c.unsupported {
		out = append(out, k.rpc)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// errorsIsUnsupported reports whether err says a broker lacks an RPC or version (ours or sarama's verdict).
func errorsIsUnsupported(err error) bool {
	return errors.Is(err, errUnsupported) || errors.Is(err, sarama.ErrUnsupportedVersion)
}
