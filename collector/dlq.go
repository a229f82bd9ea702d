package collector

import (
	"context"
	"strconv"

	"github.com/tidemark/tidemark/internal/kafka"
)

// Dead-letter record headers: the original record's key, value and headers are kept; these say where it came from
// and why it was rejected.
const (
	HeaderDLQPath      = "tidemark-dlq-path"
	HeaderDLQSource    = "tidemark-dlq-source" // "<topic>/<partition>/<offset>"
	HeaderDLQError     = "tidemark-dlq-error"
	DefaultDLQTopic    = "tidemark-dead-letters"
	DefaultProbeTopic  = "tidemark-probe"
	DefaultProbeGroup  = "tidemark-probe"
	DefaultReceiptsGrp = "tidemark-receipts"
	DefaultStateTopic  = "tidemark-replay-state"
	DefaultTapGroup    = "tidemark-tap"
	DefaultSpansTopic  = "tidemark-spans"
	DefaultSpansGroup  = "tidemark-spans"
)

// sender is the part of internal/kafka's Producer the dead-letter queue uses.
type sender interface {
	SendAll(ms []kafka.Message) error
}

// KafkaDeadLetters writes rejected records to a dead-letter topic.
type KafkaDeadLetters struct {
	Producer sender
	Topic    string
}

// Send implements DeadLetters: one message per record, keyed like the original, waiting for all acknowledgements.
func (d *KafkaDeadLetters) Send(_ context.Context, path string, recs []kafka.Record, reasons []error) error {
	ms := make([]kafka.Message, len(recs))
	for i, r := range recs {
		hs := append([]kafka.Header(nil), r.Headers...)
		hs = append(hs,
			kafka.Header{Key: []byte(HeaderDLQPath), Value: []byte(path)},
			kafka.Header{Key: []byte(HeaderDLQSource), Value: []byte(r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10))},
		)
		if i < len(reasons) && reasons[i] != nil {
			hs = append(hs, kafka.Header{Key: []byte(HeaderDLQError), Value: []byte(reasons[i].Error())})
		}
		ms[i] = kafka.Message{Topic: d.Topic, Partition: -1, Key: r.Key, Value: r.Value, Headers: hs}
	}
	return d.Producer.SendAll(ms)
}
