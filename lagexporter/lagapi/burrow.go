package lagapi

import (
	"cmp"
	"net/http"
	"slices"

	"github.com/tidemark/tidemark/lagexporter"
)

// The JSON shapes below are Burrow's (linkedin/Burrow, core/internal/httpserver/structs.go and core/protocol),
// field for field, so that clients written for Burrow decode them.

// BurrowRequestInfo is Burrow's request object: the path asked for and the host that answered.
type BurrowRequestInfo struct {
	URL  string `json:"url"`
	Host string `json:"host"`
}

// BurrowError is Burrow's error response.
type BurrowError struct {
	Error   bool              `json:"error"`
	Message string            `json:"message"`
	Request BurrowRequestInfo `json:"request"`
}

// BurrowClusterList is the response of GET /v3/kafka.
type BurrowClusterList struct {
	Error    bool              `json:"error"`
	Message  string            `json:"message"`
	Clusters []string          `json:"clusters"`
	Request  BurrowRequestInfo `json:"request"`
}

// BurrowClusterDetail is the response of GET /v3/kafka/{cluster}.
type BurrowClusterDetail struct {
	Error   bool              `json:"error"`
	Message string            `json:"message"`
	Module  BurrowCluster     `json:"module"`
	Request BurrowRequestInfo `json:"request"`
}

// BurrowCluster is Burrow's cluster module: class-name is "kafka", servers the bootstrap brokers, offset-refresh the
// poll interval in seconds. Tidemark reads topics in the same cycle as offsets, so topic-refresh equals it.
type BurrowCluster struct {
	ClassName     string              `json:"class-name"`
	Servers       []string            `json:"servers"`
	ClientProfile BurrowClientProfile `json:"client-profile"`
	TopicRefresh  int64               `json:"topic-refresh"`
	OffsetRefresh int64               `json:"offset-refresh"`
}

// BurrowClientProfile is Burrow's client profile; Tidemark shows no TLS or SASL details (null, as Burrow does for a
// profile without them).
type BurrowClientProfile struct {
	Name         string    `json:"name"`
	ClientID     string    `json:"client-id"`
	KafkaVersion string    `json:"kafka-version"`
	TLS          *struct{} `json:"tls"`
	SASL         *struct{} `json:"sasl"`
}

// BurrowConsumerList is the response of GET /v3/kafka/{cluster}/consumer.
type BurrowConsumerList struct {
	Error     bool              `json:"error"`
	Message   string            `json:"message"`
	Consumers []string          `json:"consumers"`
	Request   BurrowRequestInfo `json:"request"`
}

// BurrowTopicList is the response of GET /v3/kafka/{cluster}/topic.
type BurrowTopicList struct {
	Error   bool              `json:"error"`
	Message string            `json:"message"`
	Topics  []string          `json:"topics"`
	Request BurrowRequestInfo `json:"request"`
}

// BurrowTopicDetail is the response of GET /v3/kafka/{cluster}/topic/{topic}: the high watermark of each partition,
// indexed by partition id.
type BurrowTopicDetail struct {
	Error   bool              `json:"error"`
	Message string            `json:"message"`
	Offsets []int64           `json:"offsets"`
	Request BurrowRequestInfo `json:"request"`
}

// BurrowConsumerStatus is the response of GET /v3/kafka/{cluster}/consumer/{group}/status and /lag.
type BurrowConsumerStatus struct {
	Error   bool              `json:"error"`
	Message string            `json:"message"`
	Status  BurrowGroupStatus `json:"status"`
	Request BurrowRequestInfo `json:"request"`
}

// BurrowGroupStatus is Burrow's ConsumerGroupStatus. Status is NOTFOUND, OK, WARN or ERR (BurrowGroupStatusName);
// Complete is the fraction of Partitions whose lag is known this cycle; PartitionCount counts the partitions with a
// committed offset; TotalLag sums their CurrentLag; MaxLag is the one with the largest CurrentLag (null without
// partitions).
type BurrowGroupStatus struct {
	Cluster        string                   `json:"cluster"`
	Group          string                   `json:"group"`
	Status         string                   `json:"status"`
	Complete       float32                  `json:"complete"`
	Partitions     []*BurrowPartitionStatus `json:"partitions"`
	PartitionCount int                      `json:"partition_count"`
	MaxLag         *BurrowPartitionStatus   `json:"maxlag"`
	TotalLag       uint64                   `json:"totallag"`
}

// BurrowPartitionStatus is Burrow's PartitionStatus. Status is a BurrowPartitionStatusName; Start and End are the
// committed offset (Burrow keeps a window of commits; a snapshot holds the latest, so both are it); CurrentLag is
// Tidemark's effective offset lag (End − committed, less transaction markers); Complete is 1 when the partition's
// lag is known this cycle, 0 when it is unknown or stale.
type BurrowPartitionStatus struct {
	Topic      string        `json:"topic"`
	Partition  int32         `json:"partition"`
	Owner      string        `json:"owner"`
	ClientID   string        `json:"client_id"`
	Status     string        `json:"status"`
	Start      *BurrowOffset `json:"start"`
	End        *BurrowOffset `json:"end"`
	CurrentLag uint64        `json:"current_lag"`
	Complete   float32       `json:"complete"`
}

// BurrowOffset is Burrow's ConsumerOffset: the committed offset, the commit's time (Unix milliseconds), when it was
// first seen (Tidemark's commit time is the time it first saw the commit, so both are it) and the lag.
type BurrowOffset struct {
	Offset     int64  `json:"offset"`
	Timestamp  int64  `json:"timestamp"`
	ObservedAt int64  `json:"observedAt"`
	Lag        uint64 `json:"lag"`
}

// BurrowPartitionStatusName is Burrow's name for a partition's Tidemark status. Burrow has no AHEAD: a group
// committed past the end will skip records, which Burrow would report as a warning.
func BurrowPartitionStatusName(s lagexporter.Status) string {
	switch s {
	case lagexporter.StatusOK:
		return "OK"
	case lagexporter.StatusRewind:
		return "REWIND"
	case lagexporter.StatusAhead, lagexporter.StatusWarn:
		return "WARN"
	case lagexporter.StatusStall:
		return "STALL"
	case lagexporter.StatusStop:
		return "STOP"
	}
	return "ERR"
}

// BurrowGroupStatusName is Burrow's name for a group's Tidemark status. Burrow's group status is OK, WARN or ERR
// (its evaluator caps every partition status above ERR at ERR), so STALL and STOP are ERR, and REWIND and AHEAD,
// which Tidemark ranks as less severe than WARN, are WARN.
func BurrowGroupStatusName(s lagexporter.Status) string {
	switch s {
	case lagexporter.StatusOK:
		return "OK"
	case lagexporter.StatusRewind, lagexporter.StatusAhead, lagexporter.StatusWarn:
		return "WARN"
	}
	return "ERR"
}

// BurrowStatus is group g of cluster as Burrow's evaluator reports it. Burrow only knows partitions with a committed
// offset, so partitions without one are left out (their lag is in /api/v1/lag), as are partitions flagged
// unassigned (stale commits Tidemark keeps out of the group's sums and status). With all false only partitions whose
// status is not OK are listed (Burrow's /status); with all true every one (Burrow's /lag).
func BurrowStatus(cluster string, g *lagexporter.GroupLag, all bool) BurrowGroupStatus {
	type owner struct{ host, clientID string }
	type topicPartition struct {
		topic     string
		partition int32
	}
	owners := map[topicPartition]owner{}
	for _, m := range g.Members {
		for topic, parts := range m.Assignment {
			for _, p := range parts {
				owners[topicPartition{topic, p}] = owner{m.Host, m.ClientID}
			}
		}
	}
	st := BurrowGroupStatus{Cluster: cluster, Group: g.Group, Status: BurrowGroupStatusName(g.Status),
		Partitions: []*BurrowPartitionStatus{}}
	complete := 0
	for i := range g.Partitions {
		p := &g.Partitions[i]
		if !p.HasCommit || p.Flags.Has(lagexporter.FlagUnassigned) {
			continue
		}
		ps := &BurrowPartitionStatus{Topic: p.Topic, Partition: p.Partition, Status: BurrowPartitionStatusName(p.Status)}
		o := owners[topicPartition{p.Topic, p.Partition}]
		ps.Owner, ps.ClientID = o.host, o.clientID
		if p.Known && !p.Flags.Has(lagexporter.FlagStale) {
			ps.CurrentLag, ps.Complete = uint64(max(p.Lag, 0)), 1
			complete++
		}
		var at int64
		if !p.CommitTime.IsZero() {
			at = p.CommitTime.UnixMilli()
		}
		end := BurrowOffset{Offset: p.Committed, Timestamp: at, ObservedAt: at, Lag: ps.CurrentLag}
		start := end
		ps.Start, ps.End = &start, &end
		st.PartitionCount++
		st.TotalLag += ps.CurrentLag
		if st.MaxLag == nil || ps.CurrentLag > st.MaxLag.CurrentLag {
			st.MaxLag = ps
		}
		if all || ps.Status != "OK" {
			st.Partitions = append(st.Partitions, ps)
		}
	}
	if st.PartitionCount > 0 {
		st.Complete = float32(complete) / float32(st.PartitionCount)
	}
	return st
}

func (h *Handler) request(r *http.Request) BurrowRequestInfo {
	return BurrowRequestInfo{URL: r.URL.Path, Host: h.host}
}

func (h *Handler) burrowError(w http.ResponseWriter, r *http.Request, code int, msg string) {
	writeJSON(w, code, BurrowError{Error: true, Message: msg, Request: h.request(r)})
}

func (h *Handler) burrowClusterList(w http.ResponseWriter, r *http.Request) {
	names := []string{}
	for _, c := range h.list() {
		names = append(names, c.Name)
	}
	writeJSON(w, http.StatusOK, BurrowClusterList{Message: "cluster list returned", Clusters: names, Request: h.request(r)})
}

func (h *Handler) burrowClusterDetail(w http.ResponseWriter, r *http.Request) {
	c, ok := h.cluster(r.PathValue("cluster"))
	if !ok {
		h.burrowError(w, r, http.StatusNotFound, "cluster module not found")
		return
	}
	secs := int64(c.PollInterval.Seconds())
	writeJSON(w, http.StatusOK, BurrowClusterDetail{Message: "cluster module detail returned", Request: h.request(r),
		Module: BurrowCluster{ClassName: "kafka", Servers: append([]string{}, c.Brokers...), TopicRefresh: secs, OffsetRefresh: secs}})
}

// snapshot is the named cluster's latest snapshot; it answers the request itself (404 for no such cluster, 503
// before the first poll cycle) and returns nil when it did.
func (h *Handler) snapshot(w http.ResponseWriter, r *http.Request) *lagexporter.Snapshot {
	c, ok := h.cluster(r.PathValue("cluster"))
	if !ok {
		h.burrowError(w, r, http.StatusNotFound, "cluster not found")
		return nil
	}
	s := c.Source.Latest()
	if s == nil {
		h.burrowError(w, r, http.StatusServiceUnavailable, "no poll cycle has completed yet")
	}
	return s
}

func (h *Handler) burrowConsumerList(w http.ResponseWriter, r *http.Request) {
	s := h.snapshot(w, r)
	if s == nil {
		return
	}
	names := make([]string, 0, len(s.Groups))
	for i := range s.Groups {
		names = append(names, s.Groups[i].Group)
	}
	slices.Sort(names)
	writeJSON(w, http.StatusOK, BurrowConsumerList{Message: "consumer list returned", Consumers: names, Request: h.request(r)})
}

// burrowStatus is /status (all false) and /lag (all true). An unknown cluster or group is Burrow's NOTFOUND answer:
// 404 with error false and the status object.
func (h *Handler) burrowStatus(all bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cluster, group := r.PathValue("cluster"), r.PathValue("group")
		var g *lagexporter.GroupLag
		if c, ok := h.cluster(cluster); ok {
			s := c.Source.Latest()
			if s == nil {
				h.burrowError(w, r, http.StatusServiceUnavailable, "no poll cycle has completed yet")
				return
			}
			g = s.Group(group)
		}
		if g == nil {
			writeJSON(w, http.StatusNotFound, BurrowConsumerStatus{Message: "consumer status returned", Request: h.request(r),
				Status: BurrowGroupStatus{Cluster: cluster, Group: group, Status: "NOTFOUND", Complete: 1,
					Partitions: []*BurrowPartitionStatus{}}})
			return
		}
		writeJSON(w, http.StatusOK, BurrowConsumerStatus{Message: "consumer status returned", Request: h.request(r),
			Status: BurrowStatus(cluster, g, all)})
	}
}

func (h *Handler) burrowTopicList(w http.ResponseWriter, r *http.Request) {
	s := h.snapshot(w, r)
	if s == nil {
		return
	}
	names := make([]string, 0, len(s.Topics))
	for i := range s.Topics {
		names = append(names, s.Topics[i].Topic)
	}
	slices.Sort(names)
	writeJSON(w, http.StatusOK, BurrowTopicList{Message: "topic list returned", Topics: names, Request: h.request(r)})
}

// burrowTopicDetail lists a measured topic's high watermarks by partition id; a partition whose offsets this cycle
// could not read is -1.
func (h *Handler) burrowTopicDetail(w http.ResponseWriter, r *http.Request) {
	s := h.snapshot(w, r)
	if s == nil {
		return
	}
	i := slices.IndexFunc(s.Topics, func(t lagexporter.TopicObservation) bool { return t.Topic == r.PathValue("topic") })
	if i < 0 {
		h.burrowError(w, r, http.StatusNotFound, "cluster or topic not found")
		return
	}
	parts := slices.SortedFunc(slices.Values(s.Topics[i].Partitions), func(a, b lagexporter.PartitionObservation) int {
		return cmp.Compare(a.Partition, b.Partition)
	})
	offsets := []int64{}
	for _, p := range parts {
		for int32(len(offsets)) < p.Partition {
			offsets = append(offsets, -1)
		}
		if p.Error != "" {
			offsets = append(offsets, -1)
		} else {
			offsets = append(offsets, p.HighWatermark)
		}
	}
	writeJSON(w, http.StatusOK, BurrowTopicDetail{Message: "topic offsets returned", Offsets: offsets, Request: h.request(r)})
}
