package instrument

import (
	"github.com/IBM/sarama"
)

// producerCarrier adapts a sarama producer message's headers to OpenTelemetry's TextMapCarrier.
type producerCarrier struct{ msg *sarama.ProducerMessage }

func (c producerCarrier) Get(key string) string {
	for _, h := range c.msg.Headers {
		if string(h.Key) == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c producerCarrier) Set(key, value string) {
	for i, h := range c.msg.Headers {
		if string(h.Key) == key {
			c.msg.Headers[i].Value = []byte(value)
			return
		}
	}
	c.msg.Headers = append(c.msg.Headers, sarama.RecordHeader{Key: []byte(key), Value: []byte(value)})
}

func (c producerCarrier) Keys() []string {
	keys := make([]string, len(c.msg.Headers))
	for i, h := range c.msg.Headers {
		keys[i] = string(h.Key)
	}
	return keys
}

// consumerCarrier adapts a consumed record's headers (read-only) to OpenTelemetry's TextMapCarrier.
type consumerCarrier []*sarama.RecordHeader

func (c consumerCarrier) Get(key string) string {
	if h := header(c, key); h != nil {
		return string(h)
	}
	return ""
}

func (c consumerCarrier) Set(string, string) {}

func (c consumerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for _, h := range c {
		if h != nil {
			keys = append(keys, string(h.Key))
		}
	}
	return keys
}

// header returns the value of the last header named key (Kafka allows repeats; the last write wins), or nil.
func header(hs []*sarama.RecordHeader, key string) []byte {
	var v []byte
	for _, h := range hs {
		if h != nil && string(h.Key) == key {
			v = h.Value
			if v == nil {
				v = []byte{}
			}
		}
	}
	return v
}
