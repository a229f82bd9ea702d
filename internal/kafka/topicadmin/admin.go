package topicadmin

import (
	"errors"
	"fmt"
	"sort"

	"github.com/IBM/sarama"
)

// BrokerInfo is a live broker: its id and broker.rack ("" when the cluster has no racks).
type BrokerInfo struct {
	ID   int32
	Rack string
}

// PartitionLayout is one partition's replica assignment as the cluster reports it. Replicas[0] is the preferred
// leader (the one a preferred leader election makes leader); Leader is -1 when the partition has none.
type PartitionLayout struct {
	ID       int32
	Replicas []int32
	ISR      []int32
	Leader   int32
	// Reassigning: a replica reassignment is under way (Replicas then include the replicas being added).
	Reassigning bool
}

// Admin is the small set of admin calls that keep a topic's layout in shape (the probe topic planner): read
// the live brokers and the topic's assignment, add partitions, reassign replicas (KIP-455,
// AlterPartitionReassignments) and run a preferred leader election (KIP-460).
type Admin struct {
	adm sarama.ClusterAdmin
}

// NewAdmin connects an admin client. sc (nil: defaults with the Kafka 4 protocol) must not be shared.
func NewAdmin(brokers []string, sc *sarama.Config) (*Admin, error) {
	if sc == nil {
		sc = sarama.NewConfig()
		sc.Version = sarama.V4_0_0_0
	}
	adm, err := sarama.NewClusterAdmin(brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("connect admin to %v: %w", brokers, err)
	}
	return &Admin{adm: adm}, nil
}

// Close closes the admin client.
func (a *Admin) Close() error { return a.adm.Close() }

// Layout returns the live brokers (sorted by id) and topic's partitions (sorted by id). A topic that does not exist
// is an error wrapping sarama's unknown-topic error.
func (a *Admin) Layout(topic string) ([]BrokerInfo, []PartitionLayout, error) {
	bs, _, err := a.adm.DescribeCluster()
	if err != nil {
		return nil, nil, fmt.Errorf("describe cluster: %w", err)
	}
	brokers := make([]BrokerInfo, 0, len(bs))
	for _, b := range bs {
		brokers = append(brokers, BrokerInfo{ID: b.ID(), Rack: b.Rack()})
	}
	sort.Slice(brokers, func(i, j int) bool { return brokers[i].ID < brokers[j].ID })
	md, err := a.adm.DescribeTopics([]string{topic})
	if err != nil {
		return nil, nil, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	if len(md) != 1 {
		return nil, nil, fmt.Errorf("describe topic %s: %d topics in the answer", topic, len(md))
	}
	if !errors.Is(md[0].Err, sarama.ErrNoError) {
		return nil, nil, fmt.Errorf("describe topic %s: %w", topic, md[0].Err)
	}
	parts := make([]PartitionLayout, 0, len(md[0].Partitions))
	for _, p := range md[0].Partitions {
		l := PartitionLayout{ID: p.ID, Replicas: append([]int32(nil), p.Replicas...), ISR: append([]int32(nil), p.Isr...),
			Leader: p.Leader}
		if !errors.Is(p.Err, sarama.ErrNoError) && !errors.Is(p.Err, sarama.ErrReplicaNotAvailable) {
			l.Leader = -1 // LEADER_NOT_AVAILABLE and the like: no leader to probe
		}
		parts = append(parts, l)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].ID < parts[j].ID })
	if len(parts) > 0 {
		ids := make([]int32, len(parts))
		for i := range parts {
			ids[i] = parts[i].ID
		}
		pending, err := a.adm.ListPartitionReassignments(topic, ids)
		if err != nil {
			return nil, nil, fmt.Errorf("list reassignments of %s: %w", topic, err)
		}
		for i := range parts {
			if st := pending[topic][parts[i].ID]; st != nil {
				parts[i].Reassigning = true
			}
		}
	}
	return brokers, parts, nil
}

// AddPartitions grows topic to total partitions, the new ones (ids from the current count on) with the given replica
// lists, first replica the preferred leader.
func (a *Admin) AddPartitions(topic string, total int32, replicas [][]int32) error {
	if err := a.adm.CreatePartitions(topic, total, replicas, false); err != nil {
		return fmt.Errorf("add partitions to %s (to %d): %w", topic, total, err)
	}
	return nil
}

// Reassign moves the listed partitions of topic to the given replica lists (AlterPartitionReassignments, KIP-455);
// the others are left alone. It returns once the controller accepted the reassignment: replicas that must copy data
// join the ISR later (Layout reports the partition Reassigning meanwhile).
func (a *Admin) Reassign(topic string, moves map[int32][]int32) error {
	if len(moves) == 0 {
		return nil
	}
	// sarama sends one block per index of the slice it is given, and an empty block cancels that partition's
	// reassignment: partitions below the highest one moved that have a reassignment pending get their current target
	// again (a no-op), the others an empty block (answered NO_REASSIGNMENT_IN_PROGRESS, ignored).
	hi := int32(0)
	for p := range moves {
		hi = max(hi, p)
	}
	ids := make([]int32, hi+1)
	for i := range ids {
		ids[i] = int32(i)
	}
	pending, err := a.adm.ListPartitionReassignments(topic, ids)
	if err != nil {
		return fmt.Errorf("list reassignments of %s: %w", topic, err)
	}
	assignment := make([][]int32, hi+1)
	for p, st := range pending[topic] {
		if p <= hi && st != nil {
			assignment[p] = reassignmentTarget(st)
		}
	}
	for p, rs := range moves {
		assignment[p] = rs
	}
	err = a.adm.AlterPartitionReassignments(topic, assignment)
	if err == nil {
		return nil
	}
	for _, leaf := range leafErrors(err) {
		if !errors.Is(leaf, sarama.ErrNoReassignmentInProgress) && !errors.Is(leaf, sarama.ErrReassignPartitions) {
			return fmt.Errorf("reassign partitions of %s: %w", topic, err)
		}
	}
	return nil
}

// reassignmentTarget is the replica list a pending reassignment moves to: its replicas without those being removed.
func reassignmentTarget(st *sarama.PartitionReplicaReassignmentsStatus) []int32 {
	out := make([]int32, 0, len(st.Replicas))
	for _, r := range st.Replicas {
		removing := false
		for _, x := range st.RemovingReplicas {
			removing = removing || x == r
		}
		if !removing {
			out = append(out, r)
		}
	}
	return out
}

// leafErrors flattens an error tree (errors.Join, %w, sarama's sentinel wrapper) into the errors that wrap nothing.
func leafErrors(err error) []error {
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		var out []error
		for _, e := range u.Unwrap() {
			out = append(out, leafErrors(e)...)
		}
		return out
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			if se, ok := err.(interface{ Is(error) bool }); ok && se.Is(sarama.ErrReassignPartitions) {
				return append([]error{sarama.ErrReassignPartitions}, leafErrors(inner)...)
			}
			return leafErrors(inner)
		}
	}
	return []error{err}
}

// ElectPreferred runs a preferred leader election for the listed partitions of topic. A partition whose preferred
// leader already leads is not an error; one whose preferred replica is not in sync (PREFERRED_LEADER_NOT_AVAILABLE)
// is returned, per partition, in the joined error.
func (a *Admin) ElectPreferred(topic string, partitions []int32) error {
	if len(partitions) == 0 {
		return nil
	}
	res, err := a.adm.ElectLeaders(sarama.PreferredElection, map[string][]int32{topic: partitions})
	if err != nil {
		return fmt.Errorf("elect preferred leaders of %s %v: %w", topic, partitions, err)
	}
	var errs []error
	for p, r := range res[topic] {
		if r == nil || errors.Is(r.ErrorCode, sarama.ErrNoError) || errors.Is(r.ErrorCode, sarama.ErrElectionNotNeeded) {
			continue
		}
		errs = append(errs, fmt.Errorf("elect preferred leader of %s/%d: %w", topic, p, r.ErrorCode))
	}
	return errors.Join(errs...)
}
