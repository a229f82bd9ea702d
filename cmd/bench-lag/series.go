package main

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
)

// seriesNames says where one exporter puts offset lag and time lag per group-partition in its /metrics.
type seriesNames struct {
	lag, seconds            string // metric names; seconds "" when the exporter has no time-lag series
	group, topic, partition string // label names
}

// parseLabels parses the label set of an exposition line, `{a="x",b="y\"z"}` (text and OpenMetrics formats), and
// returns the labels and the rest of the line after the closing brace.
func parseLabels(s []byte) (map[string]string, []byte, error) {
	if len(s) == 0 || s[0] != '{' {
		return nil, s, nil
	}
	out := map[string]string{}
	i := 1
	for {
		for i < len(s) && (s[i] == ',' || s[i] == ' ') {
			i++
		}
		if i < len(s) && s[i] == '}' {
			return out, s[i+1:], nil
		}
		eq := bytes.IndexByte(s[i:], '=')
		if eq < 0 || i+eq+1 >= len(s) || s[i+eq+1] != '"' {
			return nil, nil, fmt.Errorf("bad label set %.120q", s)
		}
		name := string(s[i : i+eq])
		i += eq + 2
		var val []byte
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val = append(val, '\n')
				default:
					val = append(val, s[i])
				}
				continue
			}
			val = append(val, s[i])
		}
		if i >= len(s) {
			return nil, nil, fmt.Errorf("unterminated label value in %.120q", s)
		}
		out[name] = string(val)
		i++
	}
}

// groupPartitions extracts, from an exposition text, each group-partition's offset lag and time lag as named by n.
// Group-partitions without a time-lag series get NaN seconds.
func groupPartitions(text []byte, n seriesNames) (map[gpKey]exported, error) {
	out := map[gpKey]exported{}
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		end := bytes.IndexAny(line, "{ ")
		if len(line) == 0 || line[0] == '#' || end < 0 {
			continue
		}
		name := string(line[:end])
		if name != n.lag && (n.seconds == "" || name != n.seconds) {
			continue
		}
		labels, rest, err := parseLabels(line[end:])
		if err != nil {
			return nil, err
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return nil, fmt.Errorf("no value in %.120q", line)
		}
		v, err := strconv.ParseFloat(string(f[0]), 64)
		if err != nil {
			return nil, fmt.Errorf("value of %.120q: %w", line, err)
		}
		p, err := strconv.ParseInt(labels[n.partition], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("partition label of %.120q: %w", line, err)
		}
		k := gpKey{labels[n.group], labels[n.topic], int32(p)}
		e, ok := out[k]
		if !ok {
			e = exported{lag: math.NaN(), seconds: math.NaN()}
		}
		if name == n.lag {
			e.lag = v
		} else {
			e.seconds = v
		}
		out[k] = e
	}
	return out, nil
}
