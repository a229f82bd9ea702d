package latency

import (
	"slices"
	"sync"
	"sync/atomic"
)

// A HostID is a slot of the engine's host table in its low hostSlotBits bits and the slot's generation above them.
// A slot freed by an expired or evicted host is reused with the next generation, so an id handed out before the
// expiry (kept by a caller, in a record in flight, in a path's counters) never resolves to the host that took the
// slot over: it resolves to nothing, and its stamps count as taken on an unknown clock. The generation wraps after
// 2048 reuses of one slot; an id would have to outlive that many expiries of its slot to alias, and every cache of
// ids in this module checks the name as well (Engine.Host's own map holds states, not ids).
const (
	hostSlotBits = 20
	hostSlotMask = 1<<hostSlotBits - 1
	hostGenMask  = 1<<(31-hostSlotBits) - 1
	// MaxHostsLimit is the largest Config.MaxHosts: the slots an id can address, less the reference host's.
	MaxHostsLimit = hostSlotMask
)

// hostTable is the engine's hosts by slot (nil: free). It is read without locks; slots are stored under Engine.mu,
// and a larger table replaces it (copied slot by slot) only when every slot is in use, so growth is amortised.
type hostTable []atomic.Pointer[hostState]

// at returns the live host with id, nil for an id that is stale (its host expired) or was never issued.
func (t hostTable) at(id HostID) *hostState {
	s := uint32(id) & hostSlotMask
	if id < 0 || int(s) >= len(t) {
		return nil
	}
	if h := t[s].Load(); h != nil && h.id == id {
		return h
	}
	return nil
}

// hostBook is the engine's host bookkeeping: names to states, the free slots, counts. Lookups of a known name take
// no lock (byName); everything else runs under Engine.mu.
type hostBook struct {
	byName  sync.Map // string → *hostState, the live hosts only
	n       int      // live hosts, the reference included
	free    []HostID // ids of freed slots, each to be reused with its next generation
	evicted atomic.Uint64
}

// Host returns the id of the named host's clock, creating it on first use, and marks the host used. The reference
// host's name returns RefHost. A known name costs one lock-free map lookup.
//
// Hosts are bounded (Config.MaxHosts): creating one while MaxHosts exist first evicts the least recently used
// eighth of them (the reference host is never evicted), and EvictIdle expires hosts not used for its idle time. A
// host used again after it left starts afresh under a new id: its offset is estimated anew, and nothing the engine
// knew about it (estimate, window, skew blame) carries over to it or to another host. An id kept across an expiry
// goes stale: Offset and the Observe methods fail with ErrUnknownHost for it, and a record's stamp with it is read as
// taken on an unknown clock (UnknownHost: flagged, never corrected). Callers on a hot path may keep an id for a
// batch; calling Host again per record is cheap and keeps the host live.
func (e *Engine) Host(name string) HostID {
	if v, ok := e.hb.byName.Load(name); ok {
		h := v.(*hostState)
		e.touchHost(h)
		return h.id
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if v, ok := e.hb.byName.Load(name); ok {
		return v.(*hostState).id
	}
	if e.hb.n > e.cfg.MaxHosts { // MaxHosts besides the reference
		e.evictHostsLocked(max(1, e.cfg.MaxHosts/8))
	}
	t := *e.hosts.Load()
	var id HostID
	if k := len(e.hb.free); k > 0 {
		old := e.hb.free[k-1]
		e.hb.free = e.hb.free[:k-1]
		gen := (int32(old)>>hostSlotBits + 1) & hostGenMask
		id = HostID(gen<<hostSlotBits | int32(old)&hostSlotMask)
	} else {
		id = HostID(len(t))
		if len(t) == cap(t) {
			nt := make(hostTable, len(t), max(8, 2*len(t)))
			for i := range t {
				nt[i].Store(t[i].Load())
			}
			t = nt
		}
		t = t[:len(t)+1]
	}
	h := newHostState(name, e.two, e.env, e.anchors)
	h.id = id
	h.used.Store(e.tick.Load())
	t[uint32(id)&hostSlotMask].Store(h)
	e.hosts.Store(&t)
	e.hb.byName.Store(name, h)
	e.hb.n++
	return id
}

// touchHost stamps the host's use with the engine's tick (a load, and a store only when the tick moved).
func (e *Engine) touchHost(h *hostState) {
	if t := e.tick.Load(); h.used.Load() != t {
		h.used.Store(t)
	}
}

// removeHostLocked forgets h and frees its slot; e.mu must be held.
func (e *Engine) removeHostLocked(t hostTable, h *hostState) {
	t[uint32(h.id)&hostSlotMask].Store(nil)
	e.hb.byName.Delete(h.name)
	e.hb.free = append(e.hb.free, h.id)
	e.hb.n--
	e.hb.evicted.Add(1)
}

// evictHostsLocked removes the n least recently used hosts (never the reference); e.mu must be held.
func (e *Engine) evictHostsLocked(n int) {
	t := *e.hosts.Load()
	used := make([]int64, 0, len(t))
	for i := 1; i < len(t); i++ {
		if h := t[i].Load(); h != nil {
			used = append(used, h.used.Load())
		}
	}
	if len(used) == 0 {
		return
	}
	slices.Sort(used)
	cut := used[min(n, len(used))-1] // evict hosts used at or before cut, at most n of them
	for i := 1; i < len(t) && n > 0; i++ {
		if h := t[i].Load(); h != nil && h.used.Load() <= cut {
			e.removeHostLocked(t, h)
			n--
		}
	}
}

// evictIdleHostsLocked removes every host (but the reference) last used before cut, the engine's tick; first: the
// tick was just set for the first time, so a host used before counts its idleness from t. e.mu must be held.
func (e *Engine) evictIdleHostsLocked(cut, t int64, first bool) {
	tab := *e.hosts.Load()
	for i := 1; i < len(tab); i++ {
		h := tab[i].Load()
		switch {
		case h == nil:
		case first && h.used.Load() == 0:
			h.used.Store(t)
		case h.used.Load() < cut:
			e.removeHostLocked(tab, h)
		}
	}
}

// HostStats returns how many hosts the engine holds (the reference included) and how many it has forgotten since it
// started (idle, or least recently used at Config.MaxHosts).
func (e *Engine) HostStats() (hosts int, evicted uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hb.n, e.hb.evicted.Load()
}

// HostName returns the name of a live host id ("" for an id that is stale or was never issued).
func (e *Engine) HostName(id HostID) string {
	if h := e.host(id); h != nil {
		return h.name
	}
	return ""
}

func (e *Engine) host(id HostID) *hostState { return e.hosts.Load().at(id) }
