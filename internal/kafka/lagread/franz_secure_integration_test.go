package lagread

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.yaml.in/yaml/v3"

	"github.com/tidemark/tidemark/internal/kafkaconfig"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestFranzTransportOverSecureListeners: share, streams and consumer-protocol group reads go over franz-go (kmsg).
// On a cluster whose kafka: block has TLS they must dial through the block's TLS dialer as the sarama connections
// do, or they speak plaintext to a TLS listener and every such group reads as unsupported. Each secure listener
// (SCRAM over TLS, OAUTHBEARER over TLS, mTLS) answers ListGroups over the kgo transport of a ClusterReader built
// from the config file stack.sh wrote for it.
func TestFranzTransportOverSecureListeners(t *testing.T) {
	s := testenv.SecureStack(t)
	for name, path := range map[string]string{"scram": s.SCRAMConfig, "oauth": s.OAuthConfig, "mtls": s.MTLSConfig} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var f struct {
				Kafka kafkaconfig.Config `yaml:"kafka"`
			}
			if err := yaml.Unmarshal(b, &f); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			kc, err := f.Kafka.Resolve()
			if err != nil {
				t.Fatal(err)
			}
			r, err := NewClusterReader(kc.Brokers(), kc.Sarama())
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			cl, err := r.franzClient()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := cl.Request(ctx, kmsg.NewPtrListGroupsRequest())
			if err != nil {
				t.Fatalf("ListGroups over the kgo transport: %v", err)
			}
			if code := resp.(*kmsg.ListGroupsResponse).ErrorCode; code != 0 {
				t.Fatalf("ListGroups error code %d", code)
			}
		})
	}
}
