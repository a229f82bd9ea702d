package lagread

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/lagexporter/promexport"
)

// Real-broker tests of Kafka 4's group types, each run by Kafka's own Java clients from the cached jars: a KIP-848
// consumer group (the console consumer with group.protocol=consumer), a KIP-932 share group (the console share
// consumer) and a KIP-1071 streams group (deploy/local/streams-app). Kafka's own commands are the reference numbers.

const (
	consoleConsumer      = "org.apache.kafka.tools.consumer.ConsoleConsumer"
	consoleShareConsumer = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"
	consumerGroupCommand = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
	shareGroupCommand    = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
	configCommand        = "org.apache.kafka.tools.ConfigCommand"
	featureCommand       = "org.apache.kafka.tools.FeatureCommand"
	streamsApp           = "dev.tidemark.lagapp.LagStreamsApp"
)

func bootstrap(t *testing.T) string { return strings.Join(testenv.Kafka(t), ",") }

// describedGroup lists the groups through the reader and returns the named one's description (nil when not listed).
func (e *lagEnv) describedGroup(name string) *groupDesc {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.reader.Metadata(ctx); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.reader.Groups(ctx); err != nil { // learns each group's coordinator
		e.t.Fatal(err)
	}
	for _, id := range e.reader.Brokers() {
		r := e.reader.brokerGroups(ctx, id)
		for i := range r.descs {
			if r.descs[i].name == name {
				return &r.descs[i]
			}
		}
	}
	return nil
}

// TestGroupTypeConsumerProtocol (KIP-848): a group run by Kafka's Java consumer with group.protocol=consumer is
// described with ConsumerGroupDescribe (DescribeGroups answers error 69, or Dead without members before v6): its member and assignment are
// known, its lag equals Kafka's consumer-groups command, and a member that stops consuming while it keeps its
// partitions is STALL.
func TestGroupTypeConsumerProtocol(t *testing.T) {
	e := newLagEnv(t, func(c *lagexporter.Config) { c.Status.Window = 3 })
	topic := e.topic("kip848", 3, nil)
	produce(t, topic, []int32{0, 1, 2}, 20, time.Time{})
	group := e.prefix + "_g"
	t.Cleanup(func() { _ = testenv.Admin(t).DeleteConsumerGroup(group) })
	c := testenv.StartJava(t, testenv.KafkaLib(t)+"/*", consoleConsumer, "--bootstrap-server", bootstrap(t),
		"--topic", topic, "--group", group, "--from-beginning",
		"--consumer-property", "group.protocol=consumer", "--consumer-property", "auto.commit.interval.ms=100")

	// caught up: the one member owns all three partitions and committed every record
	g := e.waitGroup(group, func(g *lagexporter.GroupLag) bool {
		return g != nil && len(g.Members) == 1 && g.Total.CommittedSum == 60 && g.Total.Lag == 0
	})
	if got := g.Members[0].Assignment[topic]; !slices.Equal(got, []int32{0, 1, 2}) {
		t.Fatalf("member assignment %v, want %s: [0 1 2] (from ConsumerGroupDescribe)", g.Members[0].Assignment, topic)
	}
	d := e.describedGroup(group)
	if d == nil || d.groupType != GroupTypeConsumer || d.epoch < 1 || d.assignmentEpoch < 1 || d.members[0].epoch < 1 {
		t.Fatalf("description %+v, want type consumer with group, assignment and member epochs >= 1", d)
	}
	// what tools that only speak DescribeGroups get for it (kafka_exporter, kminion)
	e.checkDescribeGroupsAnswer(group)

	// stuck while assigned: the JVM is frozen, so the member stays in the group (until its 45 s session timeout)
	// without consuming or committing
	c.Pause()
	produce(t, topic, []int32{0, 1, 2}, 5, time.Time{})
	g = e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && g.Status == lagexporter.StatusStall })
	if g.Total.Lag != 15 || len(g.Members) != 1 || g.State != "Stable" {
		t.Fatalf("stalled group: lag %d, %d members, state %q; want 15, 1, Stable", g.Total.Lag, len(g.Members), g.State)
	}
	// the same numbers as Kafka's own command, which describes KIP-848 groups with ConsumerGroupDescribe too
	out := testenv.KafkaTool(t, consumerGroupCommand, "--bootstrap-server", bootstrap(t), "--describe", "--group", group)
	n := 0
	for sc := bufio.NewScanner(strings.NewReader(out)); sc.Scan(); {
		m := cgLine.FindStringSubmatch(sc.Text())
		if m == nil || m[1] != group {
			continue
		}
		part, _ := strconv.Atoi(m[3])
		pl := partLag(t, g, m[2], int32(part))
		if lag, err := strconv.ParseInt(m[6], 10, 64); err != nil || lag != pl.Lag || pl.Lag != 5 {
			t.Errorf("%s/%d: Kafka lag %s, Tidemark %d, want both 5", m[2], part, m[6], pl.Lag)
		}
		n++
	}
	if n != 3 {
		t.Fatalf("compared %d rows, want 3; command output:\n%s", n, out)
	}
}

var shareLine = regexp.MustCompile(`^(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s*$`)

// shareCommandRows runs Kafka's share-groups command and returns topic/partition -> [START-OFFSET, LAG] as printed
// ("-" for a share-partition without state).
func shareCommandRows(t *testing.T, group string) map[string][2]string {
	t.Helper()
	out := testenv.KafkaTool(t, shareGroupCommand, "--bootstrap-server", bootstrap(t), "--describe", "--group", group)
	rows := map[string][2]string{}
	for sc := bufio.NewScanner(strings.NewReader(out)); sc.Scan(); {
		if m := shareLine.FindStringSubmatch(sc.Text()); m != nil && m[1] == group {
			rows[m[2]+"/"+m[3]] = [2]string{m[4], m[5]}
		}
	}
	if len(rows) == 0 {
		t.Fatalf("no rows for %s in the share-groups command output:\n%s", group, out)
	}
	return rows
}

// compareShareCommand reads the share group in one cycle between two runs of Kafka's share-groups command and checks
// every partition against them: the lag is the command's, and the start offset lies between the two the command
// printed. The broker rewrites its stored start offset when it next persists the share-partition's state (an
// acquisition lock expiring, say): measured here, 25 before and 33 after, lag 5 both times, while the only member was
// frozen. The start offset never decreases without an offsets reset, and neither comparison's premise, a group whose
// deliveries do not move (no member, or a frozen one, and no records produced meanwhile), lets the lag change.
// It returns the group as that cycle read it.
func (e *lagEnv) compareShareCommand(group string) *lagexporter.GroupLag {
	t := e.t
	t.Helper()
	before := shareCommandRows(t, group)
	g := e.cycle().Group(group)
	after := shareCommandRows(t, group)
	if g == nil {
		t.Fatalf("share group %s not in the cycle", group)
	}
	for tp, row := range after {
		topic, ps, _ := strings.Cut(tp, "/")
		part, _ := strconv.Atoi(ps)
		pl := partLag(t, g, topic, int32(part))
		b, ok := before[tp]
		if !ok {
			b = [2]string{"-", "-"}
		}
		if row[0] == "-" || b[0] == "-" {
			if b[0] == "-" && row[0] == "-" && pl.HasCommit {
				t.Errorf("%s: Kafka prints no start offset, Tidemark has %d", tp, pl.Committed)
			}
			continue // the share-partition was initialized between the two runs: no bracket
		}
		if row[1] != b[1] {
			t.Fatalf("%s: Kafka's lag moved from %s to %s across one cycle of a group whose deliveries are frozen", tp, b[1], row[1])
		}
		lo, _ := strconv.ParseInt(b[0], 10, 64)
		hi, _ := strconv.ParseInt(row[0], 10, 64)
		if lag := strconv.FormatInt(pl.Lag, 10); !pl.HasCommit || pl.Committed < lo || pl.Committed > hi || lag != row[1] {
			t.Errorf("%s: Tidemark start offset %d (known %v), lag %s; Kafka's share-groups command start offset %d before, %d after, lag %s",
				tp, pl.Committed, pl.HasCommit, lag, lo, hi, row[1])
		}
	}
	if len(after) != len(g.Partitions) {
		t.Errorf("Kafka lists %d partitions, Tidemark %d", len(after), len(g.Partitions))
	}
	return g
}

// TestGroupTypeShare (KIP-932, KIP-1226): a share group consumed by Kafka's console share consumer is listed,
// described with ShareGroupDescribe, and measured from its share-partition start offsets (DescribeShareGroupOffsets):
// lag equals what Kafka's share-groups command prints and the start offset lies between two of its runs around the
// cycle (the broker moves its stored start offset on its own, see compareShareCommand), the time lag is the
// age of the record at the start offset, a group without members whose backlog grows is STOP, and a member that stops
// acknowledging while records wait is STALL.
func TestGroupTypeShare(t *testing.T) {
	const window = 3
	e := newLagEnv(t, func(c *lagexporter.Config) { c.Status.Window = window })
	topic := e.topic("share", 2, nil)
	produced := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	produce(t, topic, []int32{0, 1}, 30, produced)
	group := e.prefix + "_sg"
	// share groups start at the end by default (share.auto.offset.reset=latest): read the existing records
	testenv.KafkaTool(t, configCommand, "--bootstrap-server", bootstrap(t), "--alter", "--entity-type", "groups",
		"--entity-name", group, "--add-config", "share.auto.offset.reset=earliest")
	t.Cleanup(func() { _ = testenv.Admin(t).DeleteConsumerGroup(group) })
	share := func(args ...string) *testenv.JavaProcess {
		return testenv.StartJava(t, testenv.KafkaLib(t)+"/*", consoleShareConsumer,
			append([]string{"--bootstrap-server", bootstrap(t), "--topic", topic, "--group", group}, args...)...)
	}
	share("--max-messages", "25").Wait(2 * time.Minute) // consumed and acknowledged 25 records, then left the group

	d := e.describedGroup(group)
	if d == nil || d.groupType != GroupTypeShare || d.err != "" || len(d.members) != 0 || d.state != "Empty" {
		t.Fatalf("description %+v, want an Empty share group without members", d)
	}
	e.checkDescribeGroupsAnswer(group)
	e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && g.Total.CommittedSum == 25 })
	g := e.compareShareCommand(group)
	if g.GroupType != lagexporter.GroupShare || g.Total.Lag != 35 || g.SimpleConsumer || len(g.Members) != 0 {
		t.Fatalf("group type %q, lag %d, simple %v, %d members; want share, 35 (60 records, 25 acknowledged), false, 0",
			g.GroupType, g.Total.Lag, g.SimpleConsumer, len(g.Members))
	}
	// a time lag is measured at the cycle, after the records' CreateTime (an hour ago) and before now: that bounds it
	// on both sides whatever the load (a fixed slack above an hour fails when the phases before take a minute)
	maxAge := time.Since(produced)
	for _, p := range g.Partitions {
		// records were produced an hour ago: the oldest record not yet delivered is an hour old. A partition no share
		// consumer fetched has no start offset yet (the command prints "-"); its backlog counts from the log start
		// because the group's share.auto.offset.reset, read from the broker, is earliest.
		wantFlags := lagexporter.Flags(0)
		if !p.HasCommit {
			wantFlags = lagexporter.FlagNoCommit
		}
		if p.Lag > 0 && (!p.TimeLagKnown || p.TimeLag < time.Hour || p.TimeLag > maxAge || p.Flags != wantFlags) {
			t.Fatalf("%s/%d: %+v, want a time lag in [1h, %s] from the record at the start offset, flags %q", p.Topic, p.Partition, p, maxAge, wantFlags)
		}
	}

	// no members and records keep arriving: the backlog grows for nobody over a full window
	var snap *lagexporter.Snapshot
	for range window {
		produce(t, topic, []int32{0}, 1, time.Time{})
		snap = e.cycle()
	}
	if g := snap.Group(group); g == nil || g.Status != lagexporter.StatusStop || g.Total.Lag != 35+window {
		t.Fatalf("memberless share group with a growing backlog: %+v, want STOP with lag %d", g, 35+window)
	}

	// a live member that stops acknowledging: caught up first, then frozen while records arrive. Pause returns once
	// every JVM thread has stopped (a thread still running after kill(2) returned could take and acknowledge some of
	// the new records: lag 4 instead of 10 under load). From then on the member sends nothing: its pending ShareFetch
	// may still acquire the new records on the broker, but acquired records are not delivered (KIP-1226 counts them
	// in the lag), and every record delivered before is acknowledged (lag 0 above). So the broker's lag is exactly
	// the 10 new records until the member's session or the records' acquisition lock expires.
	c := share()
	// the JVM's start-up is bounded like every JVM step (WaitLines); then the cycles wait for the broker only
	c.WaitLines(35+window, 2*time.Minute)
	e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && len(g.Members) == 1 && g.Total.Lag == 0 })
	c.Pause()
	frozenLines := c.Lines()
	t.Cleanup(func() { // what the broker and the consumer did, for a failure below (runs before c is stopped)
		if t.Failed() {
			t.Logf("consumer printed %d records before the freeze, %d by now; Kafka's share-groups command: %v",
				frozenLines, c.Lines(), shareCommandRows(t, group))
		}
	})
	produce(t, topic, []int32{0, 1}, 5, time.Time{})
	g = e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && g.Status == lagexporter.StatusStall })
	if g.Total.Lag != 10 || len(g.Members) != 1 {
		t.Fatalf("stalled share group: lag %d, %d members; want 10 (the records produced while the member was frozen), 1", g.Total.Lag, len(g.Members))
	}
	e.compareShareCommand(group)
}

// TestGroupTypeStreams (KIP-1071): a Kafka Streams application with group.protocol=streams is described with
// StreamsGroupDescribe (DescribeGroups does not describe it either): its topology names the subtopology reading each
// topic, the repartition topic is marked internal, and its member owns the source and repartition partitions of its
// active tasks. Its commits are read with OffsetFetch like a consumer group's.
func TestGroupTypeStreams(t *testing.T) {
	e := newLagEnv(t, nil)
	in := e.topic("in", 2, nil)
	out := e.topic("out", 2, nil)
	produce(t, in, []int32{0, 1}, 50, time.Time{})
	app := e.prefix + "_app"
	repartition := app + "-counts-repartition"
	t.Cleanup(func() {
		adm := testenv.Admin(t)
		_ = adm.DeleteConsumerGroup(app)
		_ = adm.DeleteTopic(repartition) // the internal topics the application (its coordinator) created
		_ = adm.DeleteTopic(app + "-counts-changelog")
	})
	p := testenv.StartJava(t, testenv.StreamsAppClasspath(t), streamsApp, bootstrap(t), app, in, out, t.TempDir(), "0")
	p.WaitLine("RUNNING", 2*time.Minute)

	var d *groupDesc
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if d = e.describedGroup(app); d != nil && len(d.members) == 1 && d.topology != nil && len(d.members[0].assigned) == 2 {
			break
		}
	}
	if d == nil || d.groupType != GroupTypeStreams || d.topology == nil || len(d.members) != 1 {
		t.Fatalf("description %+v, want a streams group with a topology and one member", d)
	}
	e.checkDescribeGroupsAnswer(app)
	wantRoles := map[string]StreamsTopicRole{in: {Subtopology: "0"}, repartition: {Subtopology: "1", Internal: true}}
	if !maps.Equal(d.topology.reads, wantRoles) {
		t.Fatalf("topic roles %v, want %v (subtopology 0 reads the input, 1 the repartition topic)", d.topology.reads, wantRoles)
	}
	if want := []string{app + "-counts-changelog"}; !slices.Equal(d.topology.changelogs, want) {
		t.Fatalf("changelogs %v, want %v", d.topology.changelogs, want)
	}
	wantOwned := map[string][]int32{in: {0, 1}, repartition: {0, 1}}
	if got := d.members[0].assigned; !maps.EqualFunc(got, wantOwned, slices.Equal) {
		t.Fatalf("member owns %v, want %v (active tasks 0_0, 0_1, 1_0, 1_1)", got, wantOwned)
	}
	// all 100 input records processed and committed, then through the repartition topic
	g := e.waitGroup(app, func(g *lagexporter.GroupLag) bool {
		return g != nil && g.Topic(in) != nil && g.Topic(in).CommittedSum == 100 && g.Topic(repartition) != nil &&
			g.Topic(repartition).CommittedSum == 100 && g.Total.Lag == 0
	})
	if len(g.Members) != 1 {
		t.Fatalf("members %+v, want the app's one stream thread", g.Members)
	}
}

// checkDescribeGroupsAnswer pins what DescribeGroups, the only describe RPC classic tools use, answers for a group of
// a new type (KIP-1043): v0-v5 (sarama's range, so kafka_exporter) a Dead group
// without error, protocol or members; v6 (franz-go's kadm, so kminion) GROUP_ID_NOT_FOUND (69) with a message.
func (e *lagEnv) checkDescribeGroupsAnswer(name string) {
	e.t.Helper()
	e.reader.mu.Lock()
	id, ok := e.reader.coordOf[name]
	e.reader.mu.Unlock()
	if !ok {
		e.t.Fatalf("no coordinator known for %s", name)
	}
	b, err := e.reader.broker(id)
	if err != nil {
		e.t.Fatal(err)
	}
	dr, err := b.DescribeGroups(&sarama.DescribeGroupsRequest{Version: 5, Groups: []string{name}})
	if err != nil || len(dr.Groups) != 1 {
		e.t.Fatalf("DescribeGroups v5 %s: %+v, %v", name, dr, err)
	}
	if g := dr.Groups[0]; !errors.Is(g.Err, sarama.ErrNoError) || g.State != "Dead" || g.ProtocolType != "" || len(g.Members) != 0 {
		e.t.Fatalf("DescribeGroups v5 %s: error %v, state %q, protocol type %q, %d members; want a Dead group, no error, nothing else",
			name, g.Err, g.State, g.ProtocolType, len(g.Members))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Version, req.Groups = 6, []string{name}
	resp, err := e.reader.franzRequest(ctx, id, req)
	if err != nil {
		e.t.Fatalf("DescribeGroups v6 %s: %v", name, err)
	}
	gs := resp.(*kmsg.DescribeGroupsResponse).Groups
	if len(gs) != 1 || gs[0].ErrorCode != kerr.GroupIDNotFound.Code || gs[0].ErrorMessage == nil ||
		!strings.Contains(*gs[0].ErrorMessage, "not a classic group") {
		e.t.Fatalf("DescribeGroups v6 %s: %+v, want GROUP_ID_NOT_FOUND (69), \"... is not a classic group\"", name, gs)
	}
}

// TestGroupTypeDisabledOnBroker: a coordinator that does not serve a group type. On a private broker, a share group
// consumes 4 of 10 records; then share groups are disabled (FeatureCommand disable share.version). Kafka 4.4 still
// lists the group and still advertises the share RPCs in ApiVersions, but answers UNSUPPORTED_VERSION for the group in
// ShareGroupDescribe and DescribeShareGroupOffsets (measured here). The cycle keeps every other result (the classic
// group on the same coordinator is measured exactly), keeps the share group's last values flagged stale, logs each
// refused RPC once, and exports it in tidemark_lag_exporter_unsupported_rpc and errors_total{kind="unsupported"}.
func TestGroupTypeDisabledOnBroker(t *testing.T) {
	k := testenv.StartPrivateKafka(t)
	var logs bytes.Buffer // slog's handler serializes its writes; read once the cycles are done
	e := newLagEnvOn(t, k.Brokers, nil)
	e.reader.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	topic := e.prefix + "_t"
	adm, err := sarama.NewClusterAdmin(k.Brokers, testenv.SaramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
		t.Fatal(err)
	}
	e.waitLeadersKnow(topic, 1)
	p, err := sarama.NewSyncProducer(k.Brokers, testenv.SaramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	_ = p.Close()
	classic, share := e.prefix+"_c", e.prefix+"_s"
	testenv.KafkaTool(t, configCommand, "--bootstrap-server", k.Bootstrap(), "--alter", "--entity-type", "groups",
		"--entity-name", share, "--add-config", "share.auto.offset.reset=earliest")
	testenv.StartJava(t, testenv.KafkaLib(t)+"/*", consoleShareConsumer, "--bootstrap-server", k.Bootstrap(),
		"--topic", topic, "--group", share, "--max-messages", "4").Wait(2 * time.Minute)
	// the share consumer waited for the fresh broker's group coordinator (__consumer_offsets), which now answers
	e.commit(classic, map[string]map[int32]int64{topic: {0: 7}})
	g := e.waitGroup(share, func(g *lagexporter.GroupLag) bool { return g != nil && g.Total.CommittedSum == 4 })
	if g.GroupType != lagexporter.GroupShare || g.Total.Lag != 6 || g.Error != "" {
		t.Fatalf("share group before the feature is disabled: %+v, want type share, lag 6", g)
	}

	testenv.KafkaTool(t, featureCommand, "--bootstrap-server", k.Bootstrap(), "disable", "--feature", "share.version")
	reg := prometheus.NewRegistry()
	if err := promexport.Register(reg, e.cfg, e.loop); err != nil {
		t.Fatal(err)
	}
	for cycle := range 2 {
		s := e.cycle()
		if c := s.Group(classic); c == nil || c.Total.Lag != 3 || c.Error != "" || c.Status != lagexporter.StatusOK {
			t.Fatalf("cycle %d: classic group %+v, want lag 3 and no error: the other results are kept", cycle, c)
		}
		sg := s.Group(share)
		if sg == nil || sg.GroupType != lagexporter.GroupShare || !strings.Contains(sg.Error, "UNSUPPORTED_VERSION") {
			t.Fatalf("cycle %d: share group %+v, want it listed as share with an UNSUPPORTED_VERSION error", cycle, sg)
		}
		if pl := partLag(t, sg, topic, 0); pl.Lag != 6 || pl.Committed != 4 || !pl.Flags.Has(lagexporter.FlagStale) {
			t.Fatalf("cycle %d: share partition %+v, want the last values read (start offset 4, lag 6), flagged stale", cycle, pl)
		}
		var kinds []string
		for _, ce := range s.Errors {
			kinds = append(kinds, string(ce.Kind))
		}
		if want := []string{"unsupported", "unsupported"}; !slices.Equal(kinds, want) {
			t.Fatalf("cycle %d: errors %+v, want two of kind unsupported (describe and offsets)", cycle, s.Errors)
		}
	}
	if got, want := e.reader.Unsupported(), []string{"DescribeShareGroupOffsets", "ShareGroupDescribe"}; !slices.Equal(got, want) {
		t.Fatalf("Unsupported() = %v, want %v", got, want)
	}
	if n := strings.Count(logs.String(), "cannot answer a group read"); n != 2 {
		t.Fatalf("%d warnings in two cycles, want 2 (one per refused RPC):\n%s", n, logs.String())
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var rpcs []string
	var unsupportedErrs float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "tidemark_lag_exporter_unsupported_rpc":
				rpcs = append(rpcs, labels["rpc"])
			case "tidemark_lag_exporter_errors_total":
				if labels["kind"] == "unsupported" {
					unsupportedErrs = m.GetCounter().GetValue()
				}
			}
		}
	}
	slices.Sort(rpcs)
	if want := []string{"DescribeShareGroupOffsets", "ShareGroupDescribe"}; !slices.Equal(rpcs, want) || unsupportedErrs != 4 {
		t.Fatalf("metrics: unsupported rpc %v, errors_total{kind=unsupported} %v; want %v and 4 (2 per cycle)", rpcs, unsupportedErrs, want)
	}
}
