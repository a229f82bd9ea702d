-- 0003_lag_group_types: Kafka 4's group types in lag snapshots.
-- group_type says which protocol a group uses (classic, consumer = KIP-848, share = KIP-932, streams = KIP-1071); rows
-- written before this migration read as classic. For a share group `committed` is its share-partition start offset
-- and `lag` the broker's share-partition lag (docs/lag.md). subtopology and internal_topic mark how a streams group
-- reads a topic (the subtopology id, and 1 for an internal repartition topic), so an application's lag can be shown
-- per subtopology; '' and 0 for other types. One statement, so a failed migration leaves no half-added column.
ALTER TABLE lag_snapshots
    {{addColumn}} group_type Enum8('classic' = 1, 'consumer' = 2, 'share' = 3, 'streams' = 4) DEFAULT 'classic',
    {{addColumn}} subtopology {{.Str}} DEFAULT '',
    {{addColumn}} internal_topic UInt8 DEFAULT 0;
